package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Leader election of the drill's coordinators: short, so a killed leader
// is replaced within seconds.
const (
	coordLeaseDuration = 4 * time.Second
	coordRenewDeadline = 3 * time.Second
	coordRetryPeriod   = 500 * time.Millisecond
)

// coordinators are the drill's coordinator processes.
type coordinators struct {
	bin, kubeconfig, configPath, namespace, logDir, prefix string

	// leaderExisted: the leader Lease was there before the drill's
	// coordinators started (it is deleted afterwards only if one of the
	// drill's holds it).
	leaderExisted bool
	// guard is the guard ConfigMap's name; guardExisted: it was there
	// before (it is then left as it is).
	guard        string
	guardExisted bool

	// say tells the live view (a replica that exited by itself).
	say func(format string, args ...any)

	mu    sync.Mutex // guards procs, next, stopping and the procs' killed
	procs map[string]*coordProc
	next  int
	// stopping: stopAll has begun; no replica starts or restarts.
	stopping bool
}

// coordProc is one coordinator process.
type coordProc struct {
	identity string
	cmd      *exec.Cmd
	done     chan struct{}
	paused   bool
	// killed: the drill killed it (a kill step); it is not restarted.
	killed bool
}

// coordRestartDelay is how long a replica that exited by itself waits to
// be started again, as its Deployment's kubelet would restart it.
const coordRestartDelay = time.Second

// startCoordinators starts the scenario's coordinator replicas.
func (r *runner) startCoordinators(ctx context.Context) error {
	n := r.plan.replicas()
	if n == 0 {
		return nil
	}
	bin := r.opts.Selftaint
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the selftaint binary for the coordinator (give --selftaint): %w", err)
		}
		bin = exe
	}
	r.coord = &coordinators{
		bin: bin, kubeconfig: r.env.kubeconfig, configPath: r.plan.configPath,
		namespace: r.coordinatorNamespace(), logDir: r.plan.dir,
		prefix: "drill-" + r.s.Name + "-coordinator-", procs: map[string]*coordProc{},
		say: r.view.line,
	}
	_, err := r.env.client.CoordinationV1().Leases(r.coord.namespace).Get(ctx, fleet.DefaultLeaderLease, metav1.GetOptions{})
	switch {
	case err == nil:
		r.coord.leaderExisted = true
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the coordinator's leader Lease: %w", err)
	}
	r.coord.guard = r.plan.cfg.Coordinator.Guard.Name
	_, err = r.env.client.CoreV1().ConfigMaps(r.coord.namespace).Get(ctx, r.coord.guard, metav1.GetOptions{})
	switch {
	case err == nil:
		r.coord.guardExisted = true
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the disruption guard: %w", err)
	}
	for range n {
		if err := r.coord.start(); err != nil {
			return err
		}
	}
	r.view.line("started %d coordinator process(es) (logs in %s)", n, r.plan.dir)
	if _, err := r.coord.leader(ctx, r, time.Minute); err != nil {
		return fmt.Errorf("waiting for a coordinator to lead: %w", err)
	}
	return nil
}

// args is a coordinator process's command line.
func (c *coordinators) args(identity string) []string {
	a := []string{"coordinator", "--virtual",
		"--config", c.configPath, "--namespace", c.namespace, "--identity", identity,
		"--metrics-address", "",
		"--leader-elect-lease-duration", coordLeaseDuration.String(),
		"--leader-elect-renew-deadline", coordRenewDeadline.String(),
		"--leader-elect-retry-period", coordRetryPeriod.String(),
	}
	if c.kubeconfig != "" {
		a = append(a, "--kubeconfig", c.kubeconfig)
	}
	return a
}

// start starts one more replica (none once stopAll has begun).
func (c *coordinators) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return nil
	}
	c.next++
	id := fmt.Sprintf("%s%d", c.prefix, c.next)
	logf, err := os.Create(filepath.Join(c.logDir, id+".log"))
	if err != nil {
		return fmt.Errorf("coordinator %s: %w", id, err)
	}
	cmd := exec.Command(c.bin, c.args(id)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting coordinator %s (%s): %w", id, c.bin, err)
	}
	p := &coordProc{identity: id, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		close(p.done)
		c.exited(p, err)
	}()
	c.procs[id] = p
	return nil
}

// exited restarts a replica that exited by itself (a coordinator exits
// when it loses its leadership, which a loaded machine's slow renewals
// cause) after coordRestartDelay, as its Deployment would: one killed by
// a kill step, or stopped at the end, is not restarted.
func (c *coordinators) exited(p *coordProc, err error) {
	c.mu.Lock()
	restart := !c.stopping && !p.killed
	if restart {
		delete(c.procs, p.identity)
	}
	c.mu.Unlock()
	if !restart {
		return
	}
	if c.say != nil {
		c.say("coordinator %s exited by itself (%v; its log says why); a new replica starts in %s", p.identity, err, coordRestartDelay)
	}
	time.AfterFunc(coordRestartDelay, func() {
		if err := c.start(); err != nil && c.say != nil {
			c.say("restarting a coordinator replica failed: %v", err)
		}
	})
}

// leader is the process holding the leader Lease, waiting up to timeout
// for one of the drill's to hold it.
func (c *coordinators) leader(ctx context.Context, r *runner, timeout time.Duration) (*coordProc, error) {
	var p *coordProc
	err := testcp.Poll(ctx, timeout, 200*time.Millisecond, func() (bool, error) {
		l, err := r.env.client.CoordinationV1().Leases(c.namespace).Get(ctx, fleet.DefaultLeaderLease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			// None leads now (a leader that gave the Lease up leaves an
			// empty holder): wait for the next.
			return false, nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		cand := c.procs[*l.Spec.HolderIdentity]
		if cand == nil || exited(cand) {
			return false, fmt.Errorf("the leader Lease is held by %s, not a running coordinator of the drill's", *l.Spec.HolderIdentity)
		}
		p = cand
		return true, nil
	})
	return p, err
}

func exited(p *coordProc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs p and forgets it.
func (c *coordinators) kill(p *coordProc) {
	c.mu.Lock()
	p.killed = true
	c.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	c.mu.Lock()
	delete(c.procs, p.identity)
	c.mu.Unlock()
}

// signal sends sig to p's process group.
func (c *coordinators) signal(p *coordProc, sig syscall.Signal) error {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signalling coordinator %s: %w", p.identity, err)
	}
	c.mu.Lock()
	p.paused = sig == syscall.SIGSTOP
	c.mu.Unlock()
	return nil
}

// stopAll continues paused processes, SIGTERMs them all and waits (SIGKILL
// after a grace period).
func (c *coordinators) stopAll() []string {
	c.mu.Lock()
	c.stopping = true
	procs := make([]*coordProc, 0, len(c.procs))
	for _, p := range c.procs {
		procs = append(procs, p)
	}
	c.procs = map[string]*coordProc{}
	c.mu.Unlock()
	// All at once, then one grace period for all of them.
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	grace := time.NewTimer(10 * time.Second)
	defer grace.Stop()
	expired := false
	var stopped []string
	for _, p := range procs {
		if !expired {
			select {
			case <-p.done:
			case <-grace.C:
				expired = true
			}
		}
		what := "coordinator process " + p.identity
		if expired && !exited(p) {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			what += " (killed: not stopped 10s after SIGTERM)"
		}
		stopped = append(stopped, what)
	}
	return stopped
}

// deleteCoordinatorLeases deletes the grant and maintenance Leases of the
// drill's nodes and, when the drill ran the coordinator, its leader Lease
// and guard ConfigMap where the drill's coordinators made them.
func (r *runner) deleteCoordinatorLeases(ctx context.Context, nodes []string) ([]string, error) {
	ns := r.coordinatorNamespace()
	leases := r.env.client.CoordinationV1().Leases(ns)
	var names []string
	for _, n := range nodes {
		names = append(names, fleet.GrantName(n), fleet.SlotName(n))
	}
	if r.coord != nil && r.coord.ownsLeader(ctx, leases) {
		names = append(names, fleet.DefaultLeaderLease)
	}
	var removed []string
	var errs []error
	for _, name := range names {
		err := leases.Delete(ctx, name, metav1.DeleteOptions{})
		switch {
		case err == nil:
			removed = append(removed, "lease "+ns+"/"+name)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("deleting lease %s/%s: %w", ns, name, err))
		}
	}
	if r.coord != nil && !r.coord.guardExisted {
		err := r.env.client.CoreV1().ConfigMaps(ns).Delete(ctx, r.coord.guard, metav1.DeleteOptions{})
		switch {
		case err == nil:
			removed = append(removed, "configmap "+ns+"/"+r.coord.guard+" (the disruption guard)")
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("deleting the guard %s/%s: %w", ns, r.coord.guard, err))
		}
	}
	return removed, errors.Join(errs...)
}

// ownsLeader: the leader Lease is the drill's to delete: it was created
// for the drill's coordinators, or one of them holds it.
func (c *coordinators) ownsLeader(ctx context.Context, leases typedcoordv1.LeaseInterface) bool {
	if !c.leaderExisted {
		return true
	}
	l, err := leases.Get(ctx, fleet.DefaultLeaderLease, metav1.GetOptions{})
	return err == nil && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, c.prefix)
}
