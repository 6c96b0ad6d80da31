package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/probes"
)

// BenchmarkContention measures how long the agent's taint takes to follow
// its condition while another client writes labels and annotations to the
// same Node 80 times a second (a kubelet, controllers, an operator's
// scripts): Observe of a changed verdict (damping 0) until a watch sees
// the taint added or removed. It reports p50/p99/max in milliseconds, the
// agent's conflicts per change and the foreign writes made.
//
//	make deps && KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench Contention -benchtime 100x ./agent/
func BenchmarkContention(b *testing.B) {
	cp := testcp.Start(b, testcp.Options{})
	c := cp.Client()
	const node = "contended"
	created := cp.CreateNode(b, node, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{foreignTaint} })

	p := newSwitchProbe(probes.StatusOK)
	a := newBenchAgent(b, c, node, p)
	waitNode(b, c, node, 20*time.Second, "condition", func(n *corev1.Node) bool { return condition(n, cond) != nil })

	// The other writer has its own client, so its requests do not queue
	// behind the agent's in one rate limiter.
	other, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var foreign, foreignErrs atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(time.Second / 80)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{"bench.example.com/tick":"%d"},"annotations":{"bench.example.com/tick":"%d"}}}`, i, i)
			if _, err := other.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				foreignErrs.Add(1)
				continue
			}
			foreign.Add(1)
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()

	w, err := c.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", node).String(),
		ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	waitTaint := func(want bool) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				if n, ok := ev.Object.(*corev1.Node); ok && hasTaint(n, ourTaint) == want {
					if !hasTaint(n, foreignTaint) {
						b.Errorf("foreign taint lost: %s", describe(n))
					}
					return
				}
			case <-timeout:
				b.Fatalf("watch did not see taint present=%v within 30s", want)
			}
		}
	}
	time.Sleep(time.Second) // the other writer at full rate
	before := a.Stats()
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
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	after := a.Stats()
	b.ReportMetric(float64(after.Conflicts-before.Conflicts)/float64(b.N), "conflicts/change")
	b.ReportMetric(float64(foreign.Load()), "foreign-writes")
	b.ReportMetric(float64(foreignErrs.Load()), "foreign-errors")
}
