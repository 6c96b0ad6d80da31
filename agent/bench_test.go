package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
)

// BenchmarkProbeChangeToWatch measures how long a probe verdict takes to
// reach the Node, as a watch sees it: Observe of a changed verdict (damping
// 0) until the watch delivers the Node with the taint added or removed. It
// reports p50/p99/max in milliseconds.
//
//	make deps && KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench ProbeChangeToWatch -benchtime 200x ./agent/
func BenchmarkProbeChangeToWatch(b *testing.B) {
	cp := testcp.Start(b, testcp.Options{})
	c := cp.Client()
	const node = "bench"
	created := cp.CreateNode(b, node, nil)

	p := newSwitchProbe(probes.StatusOK)
	a := newBenchAgent(b, c, node, p)

	w, err := c.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", node).String(),
		ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	waitTaint := func(want bool) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				if n, ok := ev.Object.(*corev1.Node); ok && hasTaint(n, ourTaint) == want {
					return
				}
			case <-timeout:
				b.Fatalf("watch did not see taint present=%v within 10s", want)
			}
		}
	}
	// The first healthy verdict is decided at once; wait for it to land.
	waitNode(b, c, node, 20*time.Second, "condition", func(n *corev1.Node) bool { return condition(n, cond) != nil })

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bad := i%2 == 0
		s := probes.StatusOK
		if bad {
			s = probes.StatusProblem
		}
		start := time.Now()
		a.Observe(probes.Result{Probe: probeName, Status: s, Reason: "Bench", Message: "bench"})
		waitTaint(bad)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	st := a.Stats()
	b.ReportMetric(float64(st.ConditionWrites+st.TaintWrites)/float64(b.N), "writes/change")
}
