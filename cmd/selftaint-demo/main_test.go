package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/agent/testcp"
)

// TestDemo runs the whole demo, as `make demo` does, with a shorter fault,
// and checks that what it shows is what explain predicted.
func TestDemo(t *testing.T) {
	testcp.SkipIfShort(t, "runs the demo (a control plane and a 30s fault)")
	testcp.EtcdPath(t)
	testcp.KubePath(t, "kube-apiserver")
	bin := filepath.Join(t.TempDir(), "selftaint")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/selftaint/selftaint/cmd/selftaint").CombinedOutput(); err != nil {
		t.Fatalf("building selftaint: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--selftaint=" + bin, "--fault-for=25s", "--tolerate-for=10s"}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("demo failed: %v\nstderr: %s", err, stderr.String())
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`vnode-1, vnode-2, vnode-3 Ready`),
		regexp.MustCompile(`\$ selftaint fault inject vnode-1 --condition=memory --for=25s`),
		regexp.MustCompile(`taints: selftaint.io/memory-pressure:NoExecute`),
		regexp.MustCompile(`pod web +evicted .* explain predicted immediately`),
		regexp.MustCompile(`pod batch +evicted .* explain predicted after 10s`),
		regexp.MustCompile(`fault expired on its own .* nobody acting`),
		regexp.MustCompile(`demo/web +vnode-1 +immediately .* evicted \+[0-9.]+s +yes`),
		regexp.MustCompile(`demo/batch +vnode-1 +after 10s .* evicted \+[0-9.]+s +yes`),
		regexp.MustCompile(`demo/monitor +vnode-1 +never +still running +yes`),
		regexp.MustCompile(`demo/web-2 +vnode-2 +untouched .* still running +yes`),
		regexp.MustCompile(`\] done`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if strings.Contains(out, " NO\n") {
		t.Errorf("the summary shows a mismatch between explain and what happened")
	}
}

func TestDemoFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--fault-for=20s", "--tolerate-for=20s"}, "must be at least 5s longer"},
		{[]string{"--selftaint=/nonexistent/selftaint"}, "/nonexistent/selftaint"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tt.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
