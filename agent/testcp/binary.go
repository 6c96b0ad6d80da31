package testcp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rootModule is the module line that marks the repository root.
const rootModule = "module github.com/selftaint/selftaint"

// How to get each binary the control plane needs; used in skip/fail messages.
const (
	etcdHint = "install it with `make etcd` (apt-get install etcd-server) or point $ETCD_BIN at an etcd binary"
	kubeHint = "build it with `make kube-binaries` or point $KUBE_BIN_DIR at a directory holding kube-apiserver, kube-controller-manager, kube-scheduler and kubectl"
)

// MissingBinaryError reports that a binary the control plane (or a test)
// needs is not available. New returns it (wrapped) when a component's binary
// is missing, so a caller can tell "cannot run here" from "broke".
type MissingBinaryError struct {
	Name     string // the binary, for example "etcd"
	Err      error  // why it is not available
	HowToGet string // how to install or point at it
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("%s not available: %v; %s", e.Name, e.Err, e.HowToGet)
}

func (e *MissingBinaryError) Unwrap() error { return e.Err }

// RequireBinary returns the absolute path of the executable name. If path is
// empty, name is looked up on $PATH; otherwise path itself must be an
// executable file. When the binary is missing the test fails if $CI is "true"
// (CI must never silently skip what it is meant to test) and is skipped
// otherwise; either way the message names the binary and repeats howToGet.
func RequireBinary(t T, name, path, howToGet string) string {
	t.Helper()
	got, err := lookBinary(name, path, howToGet)
	if err != nil {
		skipOrFail(t, err)
	}
	return got
}

// skipOrFail fails t with err when $CI is "true" and skips it otherwise.
func skipOrFail(t T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v (CI=true, so this is a failure, not a skip)", err)
	} else {
		t.Skipf("%v (skipping; with CI=true this fails)", err)
	}
}

// lookBinary is findBinary with a *MissingBinaryError for a missing binary.
func lookBinary(name, path, howToGet string) (string, error) {
	got, err := findBinary(name, path)
	if err != nil {
		return "", &MissingBinaryError{Name: name, Err: err, HowToGet: howToGet}
	}
	return got, nil
}

func findBinary(name, path string) (string, error) {
	if path == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", err
		}
		return filepath.Abs(p)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", path)
	}
	return filepath.Abs(path)
}

// EtcdPath returns the etcd binary to use ($ETCD_BIN, else etcd on $PATH),
// failing or skipping the test as RequireBinary does when there is none.
func EtcdPath(t T) string {
	t.Helper()
	p, err := etcdPath()
	if err != nil {
		skipOrFail(t, err)
	}
	return p
}

// KubePath returns the path of a Kubernetes control-plane binary (for example
// "kube-apiserver") in $KUBE_BIN_DIR, else in <repo root>/bin, failing or
// skipping the test as RequireBinary does when it is missing.
func KubePath(t T, name string) string {
	t.Helper()
	p, err := kubePath(name)
	if err != nil {
		skipOrFail(t, err)
	}
	return p
}

// etcdPath is EtcdPath's lookup; a missing binary is a *MissingBinaryError.
func etcdPath() (string, error) {
	return lookBinary("etcd", os.Getenv("ETCD_BIN"), etcdHint)
}

// kubePath is KubePath's lookup; a missing binary is a *MissingBinaryError.
func kubePath(name string) (string, error) {
	return kubePathIn("", name)
}

// kubePathIn looks for name in dir, else as kubePath does.
func kubePathIn(dir, name string) (string, error) {
	if dir == "" {
		dir = os.Getenv("KUBE_BIN_DIR")
	}
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			// Without a repository root there is nowhere to look; report it as
			// a missing binary so CI fails and local runs skip.
			return lookBinary(name, filepath.Join("<repo root unknown: "+err.Error()+">", "bin", name), kubeHint)
		}
		dir = filepath.Join(root, "bin")
	}
	return lookBinary(name, filepath.Join(dir, name), kubeHint)
}

// RepoRoot walks up from the working directory (a test's package directory)
// to the directory whose go.mod declares module github.com/selftaint/selftaint.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRootModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod declaring github.com/selftaint/selftaint above the working directory")
		}
		dir = parent
	}
}

func isRootModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == rootModule {
			return true
		}
	}
	return false
}

// SkipIfShort skips a slow test under go test -short, saying why, except
// when $CI is "true": CI always runs every test, whatever flags it is given.
func SkipIfShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skipf("-short: %s (with CI=true this runs anyway)", why)
	}
}
