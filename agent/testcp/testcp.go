// Package testcp starts a real Kubernetes control plane on loopback for tests
// (and for `make demo`, which shows selftaint at work on one).
//
// It exists because the fake clientset cannot prove that our writes to the API
// are safe: it never returns 409 conflicts, ignores field selectors, does not
// enforce the status subresource and does not implement server-side apply. So
// every test that talks to the API runs a real etcd and kube-apiserver, plus
// kube-controller-manager (node lifecycle, taint eviction) and kube-scheduler
// where evictions or scheduling matter. Everything listens on 127.0.0.1 on
// random free ports under a per-test temporary directory, is torn down by
// t.Cleanup, and dies with the test binary.
//
// Start is the entry point for tests. New and Close are the same control
// plane for programs (the demo): they return errors instead of failing a
// test.
//
// The binaries come from $ETCD_BIN or $PATH (etcd) and $KUBE_BIN_DIR or
// <repo>/bin (the Kubernetes components, built by `make kube-binaries`). When
// one is missing the test is skipped, or fails under CI=true; New returns a
// *MissingBinaryError.
package testcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AdminUser is the user name of the static token that RESTConfig, Client and
// the kubeconfig authenticate with. It is in group system:masters.
const AdminUser = "testcp-admin"

// KubeVersion is the Kubernetes version the control-plane binaries are built
// at (see the Makefile).
const KubeVersion = "v1.35.4"

// How long the components have to exit after SIGTERM before they are
// killed. (The start's limit is DefaultStartTimeout, in progress.go.)
const (
	stopGrace = 10 * time.Second
	// logTailLines is how much of a component's log a failing test shows.
	logTailLines = 40
)

// T is what Start needs from its caller. *testing.T and *testing.B satisfy
// it. Programs use New and Close instead.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
}

var _ T = testing.TB(nil)

// Options selects the components Start and New run beyond etcd and
// kube-apiserver, and extra flags for them.
type Options struct {
	// ControllerManager runs kube-controller-manager with all controllers
	// (node lifecycle and taint eviction included).
	ControllerManager bool
	// Scheduler runs kube-scheduler.
	Scheduler bool
	// APIServerArgs are extra kube-apiserver flags, in --name=value form, for
	// example --enable-admission-plugins=ExtendedResourceToleration. A flag
	// that Start also sets replaces Start's value.
	APIServerArgs []string
	// ControllerManagerArgs are extra kube-controller-manager flags, for
	// example --node-monitor-grace-period=10s; they replace Start's value of
	// the same flag.
	ControllerManagerArgs []string
	// KubeBinDir, when set, is where kube-apiserver, kube-controller-manager
	// and kube-scheduler are (instead of $KUBE_BIN_DIR, else <repo root>/bin).
	KubeBinDir string
	// StartTimeout bounds the whole start, every component together
	// (DefaultStartTimeout when zero; Start and Shared read
	// $TESTCP_START_TIMEOUT first). RestartAPIServer has as long.
	StartTimeout time.Duration
	// Progress, when set, hears about every ProgressInterval
	// (DefaultProgressInterval when zero) of a start that is still
	// waiting, which component it waits for and what that one answers.
	// Start logs it to the test when nil.
	Progress         func(Progress)
	ProgressInterval time.Duration
	// KeepLogs: when a component fails to start, New keeps the
	// components' logs in Dir (and removes the rest) for the caller to
	// read; the *ComponentError names the failed one's. Without it New
	// removes everything.
	KeepLogs bool
}

// startTimeout is opts' start limit.
func (opts Options) startTimeout() time.Duration {
	if opts.StartTimeout > 0 {
		return opts.StartTimeout
	}
	return DefaultStartTimeout
}

// ControlPlane is a running control plane. Its methods are not safe for
// concurrent use with StopAPIServer, StartAPIServer, RestartAPIServer and
// Close.
type ControlPlane struct {
	// Dir is the temporary directory holding certificates, the kubeconfig,
	// etcd's data and the components' logs (<component>.log).
	Dir string
	// KubeconfigPath is a kubeconfig file for the admin user.
	KubeconfigPath string
	// StartTimes are how long each component took to become ready, in
	// start order.
	StartTimes []ComponentTime

	t          T    // the test, for a control plane from Start; nil from New
	ownDir     bool // Close removes Dir (New made it)
	stopped    bool // the components have been stopped for good
	pki        *pki
	restConfig *rest.Config
	client     kubernetes.Interface
	apiPort    int

	// components in start order; nil entries were not requested or not
	// reached.
	etcd, apiserver, controllerManager, scheduler *component

	// The start's limit, and how it reports progress.
	limit        time.Duration
	progress     func(Progress)
	interval     time.Duration
	began        time.Time // when the start began
	nextProgress time.Time // when progress is reported next
}

// ComponentError reports a control-plane component that could not be
// started or did not become ready. Its message is one line: the component,
// why, the log line that best says why, the components ready before it,
// and the log's path. New deletes the log with its directory on failure
// unless Options.KeepLogs.
type ComponentError struct {
	Component string // for example "kube-apiserver"
	LogPath   string
	LogTail   string // the last lines of the log, read when the error was made
	// LogLine is the line of LogTail that best says why (an error line;
	// for a component that exited, else its last line), without its klog
	// header; "" when none does.
	LogLine string
	// LastAnswer is, in short, what its readiness check answered last
	// ("" when it was not checked, or exited).
	LastAnswer string
	// Ready are the components that were ready before it, and how long
	// each took; Waited is how long this one was waited for.
	Ready  []ComponentTime
	Waited time.Duration
	Err    error // errors.Is(Err, ErrStartTimeout) when the start's limit ran out
}

func (e *ComponentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v", e.Component, e.Err)
	if e.LastAnswer != "" {
		fmt.Fprintf(&b, " (last answer: %s)", e.LastAnswer)
	}
	if e.LogLine != "" {
		fmt.Fprintf(&b, " (its log says: %s)", e.LogLine)
	}
	if len(e.Ready) > 0 {
		fmt.Fprintf(&b, "; ready before it: %s", FormatTimes(e.Ready))
	}
	fmt.Fprintf(&b, "; log: %s", e.LogPath)
	return b.String()
}

// Times are how long each component took, the failed one's time the time
// it was waited for.
func (e *ComponentError) Times() []ComponentTime {
	return append(append([]ComponentTime(nil), e.Ready...), ComponentTime{Component: e.Component, Took: e.Waited})
}

// tailReport is the end of the failed component's log, for a test's
// failure message.
func (e *ComponentError) tailReport() string {
	return fmt.Sprintf("last %d lines of %s:\n%s", logTailLines, e.LogPath, e.LogTail)
}

func (e *ComponentError) Unwrap() error { return e.Err }

// Start runs etcd and kube-apiserver, and kube-controller-manager and
// kube-scheduler when opts asks for them, waits until each is healthy and
// registers their teardown with t.Cleanup. It skips the test (fails it under
// CI=true) when a binary is missing, and fails it when a component does not
// become healthy within the start's limit (Options.StartTimeout, else
// $TESTCP_START_TIMEOUT, else DefaultStartTimeout), quoting the end of that
// component's log; a start that waits logs its progress to t. When the test
// fails, the end of every other component's log is logged at teardown.
func Start(t T, opts Options) *ControlPlane {
	t.Helper()
	began := time.Now()
	opts, err := startTimeoutFromEnv(opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if opts.Progress == nil {
		opts.Progress = func(p Progress) { t.Logf("testcp: start: %s", p) }
	}
	cp, err := start(testContext(t), opts, t.TempDir())
	if cp != nil {
		cp.t = t
		// Runs before t.TempDir's removal, which was registered first.
		t.Cleanup(func() {
			_ = cp.Close()
			cp.logTailsIfFailed()
		})
	}
	if err != nil {
		if mb := (*MissingBinaryError)(nil); errors.As(err, &mb) {
			skipOrFail(t, mb)
		}
		t.Fatalf("%s", failureReport(err))
	}
	t.Logf("testcp: control plane up in %v (%s; api server %s, dir %s)", time.Since(began).Round(time.Millisecond), FormatTimes(cp.StartTimes), cp.restConfig.Host, cp.Dir)
	return cp
}

// failureReport is a failed start's error for a test: its one line and,
// for a component's failure, the end of that component's log.
func failureReport(err error) string {
	var ce *ComponentError
	if errors.As(err, &ce) {
		return fmt.Sprintf("%v\n%s", err, ce.tailReport())
	}
	return err.Error()
}

// testContext is t's Context when it has one (*testing.T and *testing.B do),
// else context.Background().
func testContext(t T) context.Context {
	if c, ok := t.(interface{ Context() context.Context }); ok {
		return c.Context()
	}
	return context.Background()
}

// New runs etcd and kube-apiserver, and kube-controller-manager and
// kube-scheduler when opts asks for them, in a new temporary directory, and
// waits until each is healthy (all of them within opts' StartTimeout, less
// if ctx ends first). ctx bounds only the start-up: the components run
// until Close.
//
// On error nothing is left running and the directory is removed (but for
// the components' logs with opts.KeepLogs). A missing binary is a
// *MissingBinaryError; a component that does not start or become ready is
// a *ComponentError.
func New(ctx context.Context, opts Options) (*ControlPlane, error) {
	dir, err := os.MkdirTemp("", "testcp-")
	if err != nil {
		return nil, fmt.Errorf("testcp: creating a temporary directory: %w", err)
	}
	cp, err := start(ctx, opts, dir)
	if cp == nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cp.ownDir = true
	if err != nil {
		var ce *ComponentError
		if opts.KeepLogs && errors.As(err, &ce) {
			cp.stopAll()
			if rerr := removeAllBut(dir, ".log"); rerr != nil {
				err = errors.Join(err, fmt.Errorf("testcp: removing all but the logs in %s: %w", dir, rerr))
			}
			return nil, err
		}
		_ = cp.Close()
		return nil, err
	}
	return cp, nil
}

// removeAllBut removes everything in dir but the files whose name ends
// in suffix.
func removeAllBut(dir, suffix string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// Close stops the components, last started first (SIGTERM, then SIGKILL
// after a grace period), and waits for them to exit. For a control plane
// from New it then removes Dir. Calling it again does nothing.
func (cp *ControlPlane) Close() error {
	cp.stopAll()
	if cp.ownDir {
		cp.ownDir = false
		if err := os.RemoveAll(cp.Dir); err != nil {
			return fmt.Errorf("testcp: removing %s: %w", cp.Dir, err)
		}
	}
	return nil
}

// stopAll stops the components, last started first, once.
func (cp *ControlPlane) stopAll() {
	if cp.stopped {
		return
	}
	cp.stopped = true
	for _, c := range []*component{cp.scheduler, cp.controllerManager, cp.apiserver, cp.etcd} {
		if c != nil {
			c.stop()
		}
	}
}

// start does the work of Start and New in dir. Whatever it has started is
// stopped again when it returns an error; the ControlPlane it returns with
// that error (nil when no binary is missing and nothing was started) is for
// cleaning up and reporting the logs.
func start(ctx context.Context, opts Options, dir string) (*ControlPlane, error) {
	etcdBin, err := etcdPath()
	if err != nil {
		return nil, fmt.Errorf("testcp: %w", err)
	}
	kubePath := func(name string) (string, error) { return kubePathIn(opts.KubeBinDir, name) }
	apiBin, err := kubePath("kube-apiserver")
	if err != nil {
		return nil, fmt.Errorf("testcp: %w", err)
	}
	var kcmBin, schedBin string
	if opts.ControllerManager {
		if kcmBin, err = kubePath("kube-controller-manager"); err != nil {
			return nil, fmt.Errorf("testcp: %w", err)
		}
	}
	if opts.Scheduler {
		if schedBin, err = kubePath("kube-scheduler"); err != nil {
			return nil, fmt.Errorf("testcp: %w", err)
		}
	}

	// One limit for the whole start, however many attempts it takes.
	limit := opts.startTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, limit, ErrStartTimeout)
	defer cancel()
	interval := opts.ProgressInterval
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	began := time.Now()
	// The ports are free when chosen, not reserved: a control plane
	// starting beside this one may take one first. Such a start is tried
	// again from scratch with new ports.
	for attempt := 1; ; attempt++ {
		cp := &ControlPlane{Dir: dir, limit: limit, progress: opts.Progress, interval: interval, began: began, nextProgress: began.Add(interval)}
		err := cp.startComponents(ctx, opts, etcdBin, apiBin, kcmBin, schedBin)
		if err == nil {
			return cp, nil
		}
		cp.stopAll()
		if attempt == maxStartAttempts || ctx.Err() != nil || !portTaken(err) {
			return cp, err
		}
		if rerr := emptyDir(dir); rerr != nil {
			return cp, errors.Join(err, fmt.Errorf("testcp: emptying %s to start again: %w", dir, rerr))
		}
	}
}

// maxStartAttempts bounds the starts tried when a port was taken.
const maxStartAttempts = 3

// portTaken reports whether a start failed only because a component could
// not bind a port it was given.
func portTaken(err error) bool {
	var ce *ComponentError
	return errors.As(err, &ce) && strings.Contains(ce.LogTail, "address already in use")
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) startComponents(ctx context.Context, opts Options, etcdBin, apiBin, kcmBin, schedBin string) error {
	pkiDir, err := cp.mkdir("pki")
	if err != nil {
		return err
	}
	if cp.pki, err = newPKI(pkiDir); err != nil {
		return fmt.Errorf("testcp: writing certificates: %w", err)
	}
	ports, err := freePorts(5)
	if err != nil {
		return fmt.Errorf("testcp: finding free ports: %w", err)
	}
	etcdClient, etcdPeer, kcmPort, schedPort := ports[0], ports[1], ports[3], ports[4]
	cp.apiPort = ports[2]

	// etcd.
	etcdData, err := cp.mkdir("etcd")
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	cp.etcd = cp.newComponent("etcd", etcdBin, etcdEnv(), []string{
		"--name=default",
		"--data-dir=" + etcdData,
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--initial-cluster-state=new",
		"--quota-backend-bytes=" + strconv.Itoa(512<<20),
		"--heartbeat-interval=50",
		"--election-timeout=500",
		"--logger=zap",
		"--log-outputs=stderr",
	})
	if err := cp.run(ctx, cp.etcd, "/health", func() error { return getOK(plainClient(), etcdURL+"/health", "", `"health":"true"`) }); err != nil {
		return err
	}

	// kube-apiserver.
	apiDir, err := cp.mkdir("apiserver")
	if err != nil {
		return err
	}
	cp.apiserver = cp.newComponent("kube-apiserver", apiBin, os.Environ(), apiServerArgs(cp.pki, etcdURL, cp.apiPort, apiDir, opts.APIServerArgs))
	if err := cp.run(ctx, cp.apiserver, "/readyz", cp.apiServerReady); err != nil {
		return err
	}

	cp.restConfig = &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", cp.apiPort),
		BearerToken:     cp.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.caPEM},
		// Tests make bursts of requests; client-side throttling would only
		// slow them down. Tests of rate limiting set their own.
		QPS:   1000,
		Burst: 2000,
	}
	if cp.client, err = kubernetes.NewForConfig(cp.RESTConfig()); err != nil {
		return fmt.Errorf("testcp: creating client: %w", err)
	}
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.KubeconfigPath, cp.restConfig.Host, cp.pki); err != nil {
		return fmt.Errorf("testcp: writing kubeconfig: %w", err)
	}

	if opts.ControllerManager {
		cp.controllerManager = cp.newComponent("kube-controller-manager", kcmBin, os.Environ(), mergeArgs(append(cp.clientComponentArgs(kcmPort),
			"--service-account-private-key-file="+cp.pki.saKeyFile,
			"--use-service-account-credentials=true",
			"--root-ca-file="+cp.pki.caFile,
			"--controllers=*",
		), opts.ControllerManagerArgs))
		if err := cp.run(ctx, cp.controllerManager, "/healthz", func() error {
			return getOK(cp.tlsClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), "", "")
		}); err != nil {
			return err
		}
	}
	if opts.Scheduler {
		cp.scheduler = cp.newComponent("kube-scheduler", schedBin, os.Environ(), cp.clientComponentArgs(schedPort))
		if err := cp.run(ctx, cp.scheduler, "/healthz", func() error {
			return getOK(cp.tlsClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), "", "")
		}); err != nil {
			return err
		}
	}
	return nil
}

// RESTConfig returns a new copy of the admin user's client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.restConfig) }

// Client returns a clientset for the admin user, shared by all callers.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after a grace
// period) and waits for it to exit. etcd and its data stay.
func (cp *ControlPlane) StopAPIServer() {
	if cp.t != nil {
		cp.t.Helper()
	}
	cp.apiserver.stop()
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same
// port and with the same flags, and waits until it is ready. It fails the test
// if it does not become ready. It is for control planes from Start; with one
// from New, use RestartAPIServer.
func (cp *ControlPlane) StartAPIServer() {
	if cp.t == nil {
		panic("testcp: StartAPIServer needs a control plane from Start; use RestartAPIServer")
	}
	cp.t.Helper()
	if err := cp.RestartAPIServer(testContext(cp.t)); err != nil {
		cp.t.Fatalf("%v", err)
	}
}

// RestartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port and with the same flags, and waits until it is ready, or ctx
// ends. On failure kube-apiserver is left stopped and the error, a
// *ComponentError, quotes the end of its log.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if cp.apiserver.running() {
		return errors.New("testcp: RestartAPIServer: kube-apiserver is already running")
	}
	// The old listening socket can linger for a moment; retry a start that
	// fails only because the port is still taken.
	limit := cp.limit
	if limit <= 0 {
		limit = DefaultStartTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, limit, ErrStartTimeout)
	defer cancel()
	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := cp.apiserver.start()
		if err == nil {
			err = cp.apiserver.waitReady(ctx, "/readyz", cp.apiServerReady, limit, nil)
		}
		if err == nil {
			return nil
		}
		if attempt < 5 && !cp.apiserver.running() && strings.Contains(cp.apiserver.tail(logTailLines), "address already in use") {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
				continue
			}
		}
		exited := !cp.apiserver.running()
		cp.apiserver.stop()
		return cp.apiserver.failure(fmt.Errorf("restarting: %w", err), nil, time.Since(began), exited)
	}
}

// CreateNode creates a Node called name, after passing it to mutate (when not
// nil) to set labels, spec or status; status set here is stored, as when a
// kubelet registers. It fails t on error and returns the created Node.
func (cp *ControlPlane) CreateNode(t T, name string, mutate func(*corev1.Node)) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mutate != nil {
		mutate(node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testcp: creating node %s: %v", name, err)
	}
	return got
}

// clientComponentArgs are the flags kube-controller-manager and
// kube-scheduler share: the admin kubeconfig for everything, serving on
// 127.0.0.1:port with the shared certificate, no leader election.
func (cp *ControlPlane) clientComponentArgs(port int) []string {
	return []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--authentication-kubeconfig=" + cp.KubeconfigPath,
		"--authorization-kubeconfig=" + cp.KubeconfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + cp.pki.certFile,
		"--tls-private-key-file=" + cp.pki.keyFile,
		"--leader-elect=false",
		"--profiling=false",
	}
}

// apiServerArgs returns kube-apiserver's flags, extra replacing defaults of
// the same name.
func apiServerArgs(p *pki, etcdURL string, port int, certDir string, extra []string) []string {
	defaults := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + p.certFile,
		"--tls-private-key-file=" + p.keyFile,
		"--client-ca-file=" + p.caFile,
		"--token-auth-file=" + p.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		// API priority and fairness only adds start-up work here.
		"--enable-priority-and-fairness=false",
		// ServiceAccount admission rejects pods in a namespace until the
		// controller manager has created its "default" ServiceAccount (and
		// without one, forever), which makes pod-creating tests flaky.
		// Nothing here runs a real kubelet that would mount the token.
		// Re-enable it with --enable-admission-plugins=ServiceAccount.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
	}
	for _, a := range extra {
		name, value, _ := strings.Cut(a, "=")
		if name == "--enable-admission-plugins" && hasListItem(value, "ServiceAccount") {
			defaults = removeArg(defaults, "--disable-admission-plugins")
		}
	}
	return mergeArgs(defaults, extra)
}

// mergeArgs returns defaults with each flag that also appears in overrides
// (compared by the part before "=") replaced by the override, in place, and
// the remaining overrides appended in order.
func mergeArgs(defaults, overrides []string) []string {
	out := append([]string(nil), defaults...)
	for _, o := range overrides {
		name, _, _ := strings.Cut(o, "=")
		replaced := false
		for i, d := range out {
			if dn, _, _ := strings.Cut(d, "="); dn == name {
				out[i] = o
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}

func removeArg(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if n, _, _ := strings.Cut(a, "="); n != name {
			out = append(out, a)
		}
	}
	return out
}

func hasListItem(list, item string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == item {
			return true
		}
	}
	return false
}

// etcdEnv is the test's environment without ETCD_* variables, which etcd
// would read as flags ($ETCD_BIN among them).
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	// etcd 3.4 refuses to start on architectures other than amd64 and
	// ppc64le unless told to.
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "ppc64le" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	return env
}

func (cp *ControlPlane) apiServerReady() error {
	return getOK(cp.tlsClient(), fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.apiPort), cp.pki.adminToken, "")
}

func (cp *ControlPlane) mkdir(name string) (string, error) {
	d := filepath.Join(cp.Dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("testcp: %w", err)
	}
	return d, nil
}

func (cp *ControlPlane) newComponent(name, path string, env, args []string) *component {
	return &component{name: name, path: path, env: env, args: args, dir: cp.Dir, logPath: filepath.Join(cp.Dir, name+".log")}
}

// logTailsIfFailed shows the end of every component's log when the test
// failed, since the logs are deleted with the temporary directory. A log
// already quoted by a failure message is not repeated.
func (cp *ControlPlane) logTailsIfFailed() {
	if !cp.t.Failed() {
		return
	}
	for _, c := range []*component{cp.etcd, cp.apiserver, cp.controllerManager, cp.scheduler} {
		if c != nil && !c.reported {
			cp.t.Logf("testcp: %s", c.tailReport(30))
		}
	}
}

func (cp *ControlPlane) tlsClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.pki.caPEM)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}

func plainClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// getOK returns nil when GET url answers 200 with a body containing want.
func getOK(c *http.Client, url, token, want string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(want)) {
		return &checkError{path: req.URL.Path, status: resp.Status, body: bytes.TrimSpace(body)}
	}
	return nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Kept open until all are chosen, so the ports are distinct.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeKubeconfig writes a kubeconfig for the admin token. It is written as
// JSON (which kubeconfig loaders accept) to keep clientcmd, and its flag
// dependencies, out of this package.
func writeKubeconfig(path, server string, p *pki) error {
	type named struct {
		Name    string         `json:"name"`
		Cluster map[string]any `json:"cluster,omitempty"`
		User    map[string]any `json:"user,omitempty"`
		Context map[string]any `json:"context,omitempty"`
	}
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []named{{Name: "testcp", Cluster: map[string]any{
			"server":                     server,
			"certificate-authority-data": base64.StdEncoding.EncodeToString(p.caPEM),
		}}},
		"users":           []named{{Name: AdminUser, User: map[string]any{"token": p.adminToken}}},
		"contexts":        []named{{Name: "testcp", Context: map[string]any{"cluster": "testcp", "user": AdminUser}}},
		"current-context": "testcp",
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o600)
}

// component is one control-plane process, which may be stopped and started
// again with the same flags.
type component struct {
	name, path string
	env, args  []string
	dir        string // working directory
	logPath    string // stdout and stderr of every run, appended

	cmd  *exec.Cmd     // the current or last run; nil before the first
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's result, set before done is closed

	reported bool // a failure message already quoted the log
}

func (c *component) start() error {
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // the child holds its own copy
	fmt.Fprintf(f, "=== testcp %s: %s %s\n", time.Now().Format(time.RFC3339Nano), c.path, strings.Join(c.args, " "))
	cmd := exec.Command(c.path, c.args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		c.err = cmd.Wait()
		close(done)
	}(c.done)
	return nil
}

func (c *component) running() bool {
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to c's process group, then SIGKILL if it has not exited
// within stopGrace, and waits for it to exit.
func (c *component) stop() {
	if c.cmd == nil {
		return
	}
	p := c.cmd.Process
	if c.running() {
		signalGroup(p, sigTerm)
		select {
		case <-c.done:
		case <-time.After(stopGrace):
			signalGroup(p, sigKill)
			<-c.done
		}
	}
	// Anything the component started in its group goes with it.
	signalGroup(p, sigKill)
}

// run starts c and waits for ready (the check named check) to succeed,
// reporting progress on the way. On failure c is stopped and the error is
// a *ComponentError.
func (cp *ControlPlane) run(ctx context.Context, c *component, check string, ready func() error) error {
	began := time.Now()
	if err := c.start(); err != nil {
		return c.failure(fmt.Errorf("starting: %w", err), cp.StartTimes, 0, false)
	}
	err := c.waitReady(ctx, check, ready, cp.limit, func(last error) {
		now := time.Now()
		if cp.progress == nil || now.Before(cp.nextProgress) {
			return
		}
		for !now.Before(cp.nextProgress) {
			cp.nextProgress = cp.nextProgress.Add(cp.interval)
		}
		cp.progress(Progress{
			Ready: append([]ComponentTime(nil), cp.StartTimes...), Waiting: c.name, Check: check,
			Waited: now.Sub(began), LastAnswer: describeCheck(check, last),
			Elapsed: now.Sub(cp.began), Limit: cp.limit,
		})
	})
	if err != nil {
		exited := !c.running()
		c.stop()
		return c.failure(err, cp.StartTimes, time.Since(began), exited)
	}
	cp.StartTimes = append(cp.StartTimes, ComponentTime{Component: c.name, Took: time.Since(began)})
	return nil
}

// failure wraps err in a *ComponentError with the end of c's log, the
// components ready before it and how long it was waited for, and marks the
// log as reported. exited: c ended by itself (its last log line says why,
// if no error line does).
func (c *component) failure(err error, ready []ComponentTime, waited time.Duration, exited bool) error {
	c.reported = true
	tail := c.tail(logTailLines)
	ce := &ComponentError{
		Component: c.name, LogPath: c.logPath, LogTail: tail, LogLine: logReason(tail, exited),
		Ready: append([]ComponentTime(nil), ready...), Waited: waited, Err: err,
	}
	var we *waitError
	if errors.As(err, &we) {
		ce.LastAnswer = we.lastAnswer
	}
	return fmt.Errorf("testcp: %w", ce)
}

// waitError is a component not ready when the wait for it ended, with
// what its check answered last.
type waitError struct {
	err        error
	lastAnswer string
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// waitReady polls ready (the check named check) until it succeeds, c
// exits or ctx ends (when the start's limit, limit, ran out: the cause is
// ErrStartTimeout). waiting, when not nil, is called with ready's error
// after each failed check.
func (c *component) waitReady(ctx context.Context, check string, ready func() error, limit time.Duration, waiting func(last error)) error {
	began := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if waiting != nil {
			waiting(err)
		}
		select {
		case <-c.done:
			return fmt.Errorf("exited before it was ready (%v)", c.err)
		case <-ctx.Done():
			cause := context.Cause(ctx)
			if errors.Is(cause, ErrStartTimeout) {
				return &waitError{fmt.Errorf("not ready after %v: %w (%v)", roundDuration(time.Since(began)), cause, limit), describeCheck(check, err)}
			}
			return &waitError{fmt.Errorf("not ready when start-up was cancelled (%w)", cause), describeCheck(check, err)}
		case <-tick.C:
		}
	}
}

// tail returns the last n lines of c's log.
func (c *component) tail(n int) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		lines = append(lines, fmt.Sprintf("(reading log: %v)", err))
	}
	return strings.Join(lines, "\n")
}

func (c *component) tailReport(n int) string {
	return fmt.Sprintf("last %d lines of %s:\n%s", n, c.logPath, c.tail(n))
}
