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
// and checks that it shows every act of both parts, that what happened is
// what explain predicted, and that its closing claims all held: in part 2,
// a sick node Drained and cordoned by us with its Deployment's and
// StatefulSet's pods made again elsewhere, the StatefulSet never more than
// one pod short, a second node Waiting while the pool is held, and a drain
// given back DrainBlocked naming its PodDisruptionBudget.
func TestDemo(t *testing.T) {
	testcp.SkipIfShort(t, "runs the demo (a control plane, faults and drains for about a minute and a half)")
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
		`vnode-1, vnode-2, vnode-3, vnode-4, vnode-5, vnode-6 Ready`,
		`StatefulSet demo/db, 2 replica\(s\) preferring vnode-4, behind PodDisruptionBudget db \(maxUnavailable: 1\)`,
		`their pods are Running on the nodes they prefer`,
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
		// Part 2, act 3: the sick-node drain.
		`pod demo/db-0 on vnode-4 \(StatefulSet db\)\n +pod demo/db-1 on vnode-4`,
		`\$ selftaint fault inject vnode-4 --condition=gpu --for=30s`,
		`vnode-4  taints: selftaint.io/gpu-failure:NoSchedule`,
		`vnode-4  asks for a drain: its agent wrote selftaint.io/drain-request \(for SelftaintGPUFailure`,
		`vnode-4  cordoned by selftaint: Ready,SchedulingDisabled in kubectl get nodes \(recorded as ours: maintenance.selftaint.io/cordoned=agent/`,
		`vnode-4  SelftaintMaintenance=True \(Draining\)`,
		`pod db-0 \(StatefulSet db\) on vnode-4: evicted by the drain`,
		`pod db-1 \(StatefulSet db\) on vnode-4: evicted by the drain`,
		`pod web-[a-z0-9]+-[a-z0-9]+ \(Deployment web\) on vnode-4: evicted by the drain`,
		`pod web-[a-z0-9]+-[a-z0-9]+ \(Deployment web\) new: made by its controller, put on vnode-[12356] by kube-scheduler`,
		`pod db-[01] \(StatefulSet db\) new: made by its controller, put on vnode-[12356] by kube-scheduler`,
		`StatefulSet db  1 of 2 pods unavailable`,
		`vnode-4  SelftaintMaintenance=True \(Drained\): evicted 4 of 4 pods`,
		// Act 4: the blocked drain, the pool holding vnode-5.
		`\$ selftaint drain vnode-6 --reason="kernel upgrade" --deadline=20s\n +vnode-6  requested maintenance`,
		`vnode-6  cordoned by selftaint: Ready,SchedulingDisabled`,
		`vnode-6  SelftaintMaintenance=True \((Draining|DrainBlocked)\): .*refused: demo/ledger-[a-z0-9]+-[a-z0-9]+ by PodDisruptionBudget demo/ledger \(disruptionsAllowed 0`,
		`\$ selftaint fault inject vnode-5 --condition=gpu --for=2m0s`,
		`vnode-5  SelftaintMaintenance=True \(Waiting\): 1st in line of 1 for a maintenance slot`,
		`vnode-4 +Ready,SchedulingDisabled +True Drained`,
		`vnode-5 +Ready +True Waiting: 1st in line of 1`,
		`vnode-6 +Ready,SchedulingDisabled +True (Draining|DrainBlocked): .*PodDisruptionBudget demo/ledger`,
		`\$ selftaint explain vnode-5 --config=demo-config.yaml`,
		`Maintenance of vnode-5: `,
		`place: 1st of 1 waiting`,
		`\$ selftaint drain --wait vnode-6\n`,
		`\| vnode-6  DrainBlocked  .*refused: demo/ledger-[a-z0-9-]+ by PodDisruptionBudget demo/ledger`,
		`vnode-6  SelftaintMaintenance=False \(DrainBlocked\): the drain did not finish by its deadline`,
		`vnode-6  uncordoned by selftaint: schedulable again`,
		`\| selftaint drain: 1 of 1 nodes did not drain: vnode-6: DrainBlocked`,
		`selftaint drain --wait vnode-6 exited with status 1\n`,
		`\$ selftaint drain --done vnode-6\n +vnode-6  removed its maintenance request`,
		`vnode-5  cordoned by selftaint`,
		`vnode-5  SelftaintMaintenance=True \(Drained\)`,
		`vnode-4  SelftaintMaintenance=False \(Released\)`,
		`vnode-4  uncordoned by selftaint: schedulable again`,
		// Part 2's summary: each claim held.
		`vnode-5 +its agent \(SelftaintGPUFailure\) .* after [0-9.]+s Waiting`,
		`vnode-6 +an operator \(kernel upgrade\) .* never +\+[0-9.]+s DrainBlocked`,
		`A sick-node drain: vnode-4's agent asked .* evicted its 4 pods`,
		`StatefulSet db never had more than 1 of its 2 pods unavailable`,
		`One drain at a time \(maxParallel: 1, at most 1 slot held at once\): vnode-5 waited`,
		`A drain that cannot finish says why, and ends: vnode-6's was refused by PodDisruptionBudget ledger`,
		`vnode-4's GPU fault expired after 30s: its agent withdrew the request \(endWhenHealthy\)`,
		`\] done`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	for _, bad := range []string{" NO\n", "NOT SHOWN", "BUDGET EXCEEDED", "OUT OF ORDER", "PDB VIOLATED", "POOL EXCEEDED"} {
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
