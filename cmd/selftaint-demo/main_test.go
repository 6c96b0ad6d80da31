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

// TestDemo runs the whole demo, as `make demo` does, with shorter faults,
// and checks that it shows both acts, that what happened is what explain
// predicted, and that its closing claims all held.
func TestDemo(t *testing.T) {
	testcp.SkipIfShort(t, "runs the demo (a control plane and faults for about a minute)")
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
	for _, want := range []string{
		`vnode-1, vnode-2, vnode-3 Ready`,
		`coordinator elected leader`,
		// Act 1: the fallback at once, NoExecute with the grant, evictions.
		`\$ selftaint fault inject vnode-1 --condition=memory --for=25s`,
		// The grant can come so fast that one poll sees the fallback and
		// NoExecute land together: then both notes follow one line.
		`vnode-1  taints: selftaint.io/memory-pressure:NoSchedule(, selftaint.io/memory-pressure:NoExecute)?\n +fallback on`,
		`vnode-1  granted: Lease selftaint/selftaint-grant-vnode-1`,
		`vnode-1  taints: selftaint.io/memory-pressure:NoSchedule, selftaint.io/memory-pressure:NoExecute\n( +fallback on[^\n]*\n)? +NoExecute joined the fallback`,
		`pod web +evicted .* explain predicted immediately once vnode-1 holds a grant`,
		`pod batch +evicted .* explain predicted 10s after vnode-1 holds a grant`,
		// Act 2: two more nodes wait with the fallback only.
		`\$ selftaint fault inject vnode-2 --condition=memory --for=55s`,
		`\$ selftaint fault inject vnode-3 --condition=memory --for=15s`,
		`vnode-2  taints: selftaint.io/memory-pressure:NoSchedule\n`,
		`vnode-3  taints: selftaint.io/memory-pressure:NoSchedule\n`,
		`\$ selftaint explain vnode-2 --config=demo-config.yaml`,
		`budget: 1 of 1 grants held .*; 2 node\(s\) waiting`,
		`this node: asked since .*; no grant: 1st of 2 waiting`,
		`vnode-3  taints: none of ours\n +fault expired on its own \(it lasted 15s\).*never held a grant, so its pods were never evicted`,
		`vnode-1  taints: none of ours\n +fault expired on its own \(it lasted 25s\).*nobody acting`,
		`vnode-2  granted: .*\n +the grant passed on: vnode-1's was released`,
		`pod web-2 +evicted .* explain predicted immediately once vnode-2 holds a grant`,
		`vnode-2  taints: none of ours\n +fault expired on its own \(it lasted 55s\).*nobody acting`,
		// The summary.
		`vnode-3 .* never: [0-9.]+s in line, then its fault ended +never`,
		`demo/web +vnode-1 +immediately once vnode-1 holds a grant \(due \+[0-9.]+s\) +evicted \+[0-9.]+s +yes`,
		`demo/batch +vnode-1 +10s after vnode-1 holds a grant \(due \+[0-9.]+s\) +evicted \+[0-9.]+s +yes`,
		`demo/monitor +vnode-1 +never +still running +yes`,
		`demo/web-2 +vnode-2 +immediately once vnode-2 holds a grant \(due \+[0-9.]+s\) +evicted \+[0-9.]+s +yes`,
		`demo/web-3 +vnode-3 +immediately once vnode-3 holds a grant +still running: vnode-3 never held a grant +yes`,
		`The fallback went on at once`,
		`NoExecute came only under the budget: at most 1 grant\(s\) held and 1 node\(s\) carrying NoExecute at once`,
		`Grants passed on in the order the nodes asked: vnode-1, then vnode-2,`,
		`A wait that outlasted its fault evicted no one: vnode-3's fault ended while it waited in line; web-3 kept running`,
		`explain's predictions held for all 5 pods`,
		`\] done`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	for _, bad := range []string{" NO\n", "NOT SHOWN", "BUDGET EXCEEDED", "OUT OF ORDER"} {
		if strings.Contains(out, bad) {
			t.Errorf("the demo's output shows %q: something did not happen as explain or the budget said", strings.TrimSpace(bad))
		}
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
