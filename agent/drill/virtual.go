package drill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/agent/virtual"
	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// virtualLeaseDuration is the drill's virtual nodes' Lease: short, so a
// stopped node is found NotReady soon after the grace period.
const virtualLeaseDuration = 8 * time.Second

// kubelets stops and resumes single virtual nodes' kubelets (a NotReady
// step).
type kubelets interface {
	Stop(node string) error
	Resume(node string) error
}

// virtualFleet is the drill's virtual nodes, one virtual.Run per pool.
type virtualFleet struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	// control is each node's pool's control; nil where none can stop a
	// kubelet.
	control map[string]kubelets
	mu      sync.Mutex // guards errs
	errs    []error
}

// poolControl attaches a kubelet control to a pool's options (one per
// Run).
func poolControl(opts *virtual.Options) kubelets {
	c := virtual.NewControl()
	opts.Control = c
	return c
}

// startVirtual runs the pools' nodes in this process and waits until each
// is Ready.
func (r *runner) startVirtual(ctx context.Context) error {
	pools := r.s.Cluster.Pools
	if len(pools) == 0 {
		return nil
	}
	cfg := r.plan.cfg
	names := virtualNames(pools)
	// The nodes' own client, its limit scaled with their number (as
	// `selftaint virtual` scales it), apart from the runner's: 200 nodes
	// renewing 8 s Leases behind the runner's 50 requests/s fell ever
	// further behind, and starved the runner's own reads.
	rc := rest.CopyConfig(r.env.rc)
	rc.UserAgent = FieldManager + "-virtual"
	rc.QPS, rc.Burst = virtualQPS(len(names), virtualLeaseDuration)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building the virtual nodes' API client: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	vf := &virtualFleet{cancel: cancel, control: map[string]kubelets{}}
	r.virtual = vf
	core, leases := client.CoreV1(), client.CoordinationV1()
	for i, p := range pools {
		tmpl, err := poolTemplate(p)
		if err != nil {
			return &BadFileError{Field: fmt.Sprintf("cluster.pools[%d]", i), Err: err}
		}
		names := virtual.Names(p.Name+"-", p.Count)
		opts := cfg.VirtualOptions(leases, r.coordinatorNamespace())
		opts.Names, opts.Core, opts.Template = names, core, tmpl
		opts.DeleteOnExit, opts.LeaseDuration, opts.Logger = true, virtualLeaseDuration, r.log.With("pool", p.Name)
		if c := poolControl(&opts); c != nil {
			for _, n := range names {
				vf.control[n] = c
			}
		}
		r.track(func(c *created) { c.add(&c.nodes, names...) })
		vf.done.Add(1)
		go func() {
			defer vf.done.Done()
			if err := virtual.Run(runCtx, opts); err != nil && !errors.Is(err, context.Canceled) {
				vf.mu.Lock()
				vf.errs = append(vf.errs, fmt.Errorf("pool %s: %w", p.Name, err))
				vf.mu.Unlock()
				r.view.line("virtual nodes of pool %s stopped: %v", p.Name, err)
			}
		}()
	}
	r.view.line("registering %d virtual nodes: %s", len(names), poolRanges(pools))
	ready, said := 0, time.Now()
	err = testcp.Poll(ctx, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		if err := vf.err(); err != nil {
			return false, err
		}
		// One List of the pools' nodes, not a Get per node.
		list, err := r.env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PoolLabel, ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		var registered int
		ready, registered = readyCount(list.Items, names)
		if ready < len(names) && time.Since(said) >= 10*time.Second {
			r.view.line("%d of %d virtual nodes Ready (%d registered)", ready, len(names), registered)
			said = time.Now()
		}
		return ready == len(names), nil
	})
	if err != nil {
		if verr := vf.err(); verr != nil {
			err = verr
		}
		return fmt.Errorf("waiting for the virtual nodes to be Ready (%d of %d are): %w", ready, len(names), err)
	}
	r.view.line("virtual nodes Ready")
	return nil
}

// virtualQPS is the client-side limit of the drill's virtual nodes: each
// renews its Lease every quarter of leaseDuration and has its agent's and
// pods' writes besides (two requests a second, as `selftaint virtual`
// allows each), at least 20 in all; the burst is twice that.
func virtualQPS(nodes int, leaseDuration time.Duration) (float32, int) {
	perNode := 2.0
	if leaseDuration > 0 {
		perNode += 4 / leaseDuration.Seconds()
	}
	qps := max(20, float32(float64(nodes)*perNode))
	return qps, int(2 * qps)
}

// readyCount is how many of names are among nodes, Ready and without the
// not-ready taint, and how many are among them at all.
func readyCount(nodes []corev1.Node, names []string) (ready, registered int) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for i := range nodes {
		n := &nodes[i]
		if !want[n.Name] {
			continue
		}
		registered++
		if nodeReady(n) && !hasTaint(n, corev1.TaintNodeNotReady) {
			ready++
		}
	}
	return ready, registered
}

// poolRanges names the pools' nodes briefly: "web-1..web-3, gpu-1".
func poolRanges(pools []tdrill.Pool) string {
	parts := make([]string, 0, len(pools))
	for _, p := range pools {
		switch p.Count {
		case 1:
			parts = append(parts, p.Name+"-1")
		default:
			parts = append(parts, fmt.Sprintf("%s-1..%s-%d", p.Name, p.Name, p.Count))
		}
	}
	return strings.Join(parts, ", ")
}

func (vf *virtualFleet) err() error {
	vf.mu.Lock()
	defer vf.mu.Unlock()
	return errors.Join(vf.errs...)
}

// stop stops the virtual nodes (deleting their Nodes) and waits.
func (vf *virtualFleet) stop() error {
	vf.cancel()
	vf.done.Wait()
	return vf.err()
}

// poolTemplate is what a pool's nodes register with.
func poolTemplate(p tdrill.Pool) (virtual.NodeTemplate, error) {
	t := virtual.NodeTemplate{Capacity: virtual.DefaultCapacity(), Labels: map[string]string{}}
	maps.Copy(t.Capacity, p.Capacity)
	maps.Copy(t.Labels, p.Labels)
	t.Labels[PoolLabel] = p.Name
	for j, s := range p.Taints {
		taint, err := taints.ParseTaint(s)
		if err != nil {
			return t, fmt.Errorf("taints[%d]: %w", j, err)
		}
		t.Taints = append(t.Taints, taint)
	}
	return t, nil
}

// PoolLabel is set on each virtual node to its pool's name.
const PoolLabel = "drill.selftaint.io/pool"

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// deleteVirtualNodes deletes the Nodes of names that are still there
// (virtual.Run deletes them on exit; one it could not is deleted here),
// and their Leases in kube-node-lease.
func (r *runner) deleteVirtualNodes(ctx context.Context, names []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, n := range names {
		err := r.env.client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", n, err))
			continue
		}
		removed = append(removed, "node "+n)
		err = r.env.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting the Lease of node %s: %w", n, err))
		}
	}
	return removed, errors.Join(errs...)
}
