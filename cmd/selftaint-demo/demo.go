package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
)

const (
	namespace = "demo"
	target    = "vnode-1"
	condition = "SelftaintMemoryPressure"
	taintKey  = "selftaint.io/memory-pressure"
)

// demoConfig makes the memory condition a NoExecute taint, so the drill
// shows evictions.
const demoConfig = `# selftaint config for the demo: memory pressure evicts.
rules:
- condition: SelftaintMemoryPressure
  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}
`

// demo is one run of the drill.
type demo struct {
	opts  options
	out   io.Writer
	start time.Time

	cp        *testcp.ControlPlane
	client    kubernetes.Interface
	dir       string
	predicted map[string]taints.Eviction // by pod name, from explain after the taint
}

// say prints one timeline line.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) (err error) {
	fmt.Fprintln(d.out, "selftaint demo: a NoExecute fault on a virtual node, on a real local control plane")
	fmt.Fprintln(d.out)
	var stopVirtual func()
	defer func() {
		d.say("cleaning up: stopping the virtual nodes and the control plane")
		if stopVirtual != nil {
			stopVirtual()
		}
		if d.cp != nil {
			if cerr := d.cp.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		d.say("done")
	}()

	d.say("starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 ...")
	d.cp, err = testcp.New(ctx, testcp.Options{ControllerManager: true, Scheduler: true})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	d.client = d.cp.Client()
	d.dir = d.cp.Dir
	d.say("control plane up. To look around meanwhile: export KUBECONFIG=%s", d.cp.KubeconfigPath)

	cfg := d.dir + "/demo-config.yaml"
	if err := os.WriteFile(cfg, []byte(demoConfig), 0o600); err != nil {
		return err
	}
	if stopVirtual, err = d.startVirtual(cfg); err != nil {
		return err
	}

	if err := d.waitNodesReady(ctx); err != nil {
		return err
	}
	if err := d.createPods(ctx); err != nil {
		return err
	}

	proposal := taintKey + ":NoExecute"
	d.say("what would a NoExecute taint on %s do? (nothing is tainted yet)", target)
	if _, err := d.selftaint(ctx, true, "explain", target, "--taint="+proposal); err != nil {
		return err
	}
	if err := d.predict(ctx, proposal); err != nil {
		return err
	}
	d.say("injecting the fault; the virtual node's agent publishes the condition and the rule taints the node:")
	injected := time.Now()
	if _, err := d.selftaint(ctx, true, "fault", "inject", target, "--condition=memory",
		"--for="+d.opts.faultFor.String(), "--message=demo: the node ran out of memory", "--config="+cfg); err != nil {
		return err
	}
	if err := d.watch(ctx, injected); err != nil {
		return err
	}
	if d.opts.keep {
		d.say("--keep: everything stays up until Ctrl-C (KUBECONFIG=%s)", d.cp.KubeconfigPath)
		<-ctx.Done()
	}
	return nil
}

// startVirtual runs `selftaint virtual` for three nodes and returns how to
// stop it.
func (d *demo) startVirtual(cfg string) (func(), error) {
	args := []string{"virtual", "--nodes=3", "--name-prefix=vnode-", "--kubeconfig=" + d.cp.KubeconfigPath, "--config=" + cfg, "--log-level=warn", "--stats-interval=0"}
	d.say("$ selftaint %s", strings.Join(args[:3], " "))
	logPath := d.dir + "/selftaint-virtual.log"
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(d.opts.selftaint, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting selftaint virtual: %w", err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	}, nil
}

// selftaint runs one selftaint command against the demo's cluster, showing
// it and (when show) its output.
func (d *demo) selftaint(ctx context.Context, show bool, args ...string) ([]byte, error) {
	shown := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--config=") })
	if show {
		for i, a := range shown {
			if k, v, ok := strings.Cut(a, "="); ok && strings.Contains(v, " ") {
				shown[i] = k + "=" + strconv.Quote(v)
			}
		}
		d.say("$ selftaint %s", strings.Join(shown, " "))
	}
	cmd := exec.CommandContext(ctx, d.opts.selftaint, append(args, "--kubeconfig="+d.cp.KubeconfigPath)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("selftaint %s: %w: %s", strings.Join(shown, " "), err, stderr.String())
	}
	if show {
		for _, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
			fmt.Fprintf(d.out, "          %s\n", line)
		}
	}
	return stdout.Bytes(), nil
}

func (d *demo) waitNodesReady(ctx context.Context) error {
	names := []string{"vnode-1", "vnode-2", "vnode-3"}
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		for _, name := range names {
			n, err := d.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if conditionStatus(n, corev1.NodeReady) != corev1.ConditionTrue || hasTaint(n, corev1.TaintNodeNotReady) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the virtual nodes to be Ready (log: %s/selftaint-virtual.log): %w", d.dir, err)
	}
	d.say("%s Ready: registered, leases renewing, the node lifecycle controller lifted not-ready", strings.Join(names, ", "))
	return nil
}

// demoPod is one pod of the drill.
type demoPod struct {
	name, node, about string
	tolerate          *int64 // nil: no toleration; -1: forever
}

func (d *demo) pods() []demoPod {
	secs := int64(d.opts.tolerateFor / time.Second)
	return []demoPod{
		{"web", target, "no toleration", nil},
		{"batch", target, fmt.Sprintf("tolerates the taint for %ds", secs), &secs},
		{"monitor", target, "tolerates the taint forever", ptr.To[int64](-1)},
		{"web-2", "vnode-2", "no toleration, on a healthy node", nil},
	}
}

func (d *demo) createPods(ctx context.Context) error {
	if _, err := d.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	for _, p := range d.pods() {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: p.name},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: p.node},
				Containers:   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			},
		}
		if p.tolerate != nil {
			tol := corev1.Toleration{Key: taintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
			if *p.tolerate >= 0 {
				tol.TolerationSeconds = p.tolerate
			}
			pod.Spec.Tolerations = []corev1.Toleration{tol}
		}
		if _, err := d.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.name, err)
		}
		d.say("pod %s/%s on %s: %s", namespace, p.name, p.node, p.about)
	}
	err := poll(ctx, time.Minute, func() (bool, error) {
		list, err := d.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(d.pods()), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods to run: %w", err)
	}
	d.say("all pods scheduled by kube-scheduler and Running on their virtual nodes")
	return nil
}

// seen is what the live view last showed of one pod.
type seen struct {
	deleting, gone time.Time
}

// watch shows, every 100ms, what changed on the node and its pods, with
// explain's prediction beside each eviction, until the fault has expired and
// cleared; then a summary.
func (d *demo) watch(ctx context.Context, injected time.Time) error {
	w := &watchState{injected: injected, pods: map[string]*seen{}}
	deadline := injected.Add(d.opts.faultFor + 30*time.Second)
	for _, p := range d.pods() {
		w.pods[p.name] = &seen{}
	}
	for w.clearedAt.IsZero() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the fault did not clear by itself within 30s of its expiry")
		}
		node, err := d.client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := time.Now()
		d.showNode(w, node, now)
		if err := d.showPods(ctx, w, now); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.summary(w.pods, w.injected, w.taintedAt)
	return nil
}

// watchState is what watch has shown so far.
type watchState struct {
	injected   time.Time // when the fault was written
	lastCond   string
	lastTaints string
	taintedAt  time.Time
	clearedAt  time.Time
	pods       map[string]*seen // by pod name
}

// rel is t relative to the injection, as "+1.5s".
func (w *watchState) rel(t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(w.injected).Seconds())
}

// showNode shows what changed in the node's condition and our taints since
// the last poll, and notes when the taint landed and cleared.
func (d *demo) showNode(w *watchState, node *corev1.Node, now time.Time) {
	if c := taints.FindCondition(node, condition); c != nil {
		if s := fmt.Sprintf("%s=%s (%s)", condition, c.Status, c.Reason); s != w.lastCond {
			d.say("%s  condition %s: %s", target, s, c.Message)
			w.lastCond = s
		}
	}
	s := ourTaints(node)
	if s == w.lastTaints {
		return
	}
	d.say("%s  taints: %s", target, orNone(s))
	w.lastTaints = s
	landed, cleared := taintTransition(s, w.taintedAt)
	if landed {
		w.taintedAt = now
		d.say("          taint applied %s after the fault was written", w.rel(now))
	} else if cleared {
		w.clearedAt = now
		d.say("          fault expired on its own (expiry %s), condition and taint cleared, nobody acting", w.rel(w.injected.Add(d.opts.faultFor)))
	}
}

// taintTransition says whether our taints changing to s is the taint
// landing (the first taints) or clearing (none, after it landed at
// taintedAt).
func taintTransition(s string, taintedAt time.Time) (landed, cleared bool) {
	return s != "" && taintedAt.IsZero(), s == "" && !taintedAt.IsZero()
}

// showPods shows the pods that began to be evicted or went away since the
// last poll.
func (d *demo) showPods(ctx context.Context, w *watchState, now time.Time) error {
	for _, p := range d.pods() {
		st := w.pods[p.name]
		if !st.gone.IsZero() {
			continue
		}
		pod, err := d.client.CoreV1().Pods(namespace).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		found := err == nil
		evicted, gone := podTransition(*st, found, found && pod.DeletionTimestamp != nil)
		if evicted {
			st.deleting = now
			d.say("pod %-8s evicted by the taint-eviction controller at %s; explain predicted %s", p.name, w.rel(now), d.prediction(p.name, w.injected, w.taintedAt))
		}
		if gone {
			st.gone = now
			d.say("pod %-8s gone: the virtual kubelet stopped it and the deletion completed", p.name)
		}
	}
	return nil
}

// podTransition says what a poll of a pod last seen as st shows: its
// eviction beginning (it is being deleted or already gone, and was not
// seen deleting before) and its being gone (not found).
func podTransition(st seen, found, deleting bool) (evicted, gone bool) {
	return (!found || deleting) && st.deleting.IsZero(), !found
}

// predict keeps explain's verdict on each pod for the proposed taint; the
// clock of each eviction starts when the taint lands.
func (d *demo) predict(ctx context.Context, proposal string) error {
	out, err := d.selftaint(ctx, false, "explain", target, "--taint="+proposal, "--output=json")
	if err != nil {
		return err
	}
	var evs []taints.Eviction
	if err := json.Unmarshal(out, &evs); err != nil {
		return fmt.Errorf("reading explain's output: %w", err)
	}
	d.predicted = map[string]taints.Eviction{}
	for _, e := range evs {
		d.predicted[e.Name] = e
	}
	return nil
}

// prediction says what explain predicted for pod, timed from when the
// taint landed (tainted) relative to the injection.
func (d *demo) prediction(pod string, injected, tainted time.Time) string {
	e, ok := d.predicted[pod]
	switch {
	case !ok:
		return "untouched (not on the tainted node)"
	case e.When == taints.EvictNever:
		return "never"
	case e.When == taints.EvictImmediately:
		return fmt.Sprintf("immediately (+%.1fs)", tainted.Sub(injected).Seconds())
	default:
		return fmt.Sprintf("after %s (+%.1fs)", e.After, tainted.Add(e.After).Sub(injected).Seconds())
	}
}

// summary compares explain's predictions with what happened.
func (d *demo) summary(pods map[string]*seen, injected, tainted time.Time) {
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tEXPLAIN PREDICTED\tHAPPENED\tMATCH")
	for _, p := range d.pods() {
		st := pods[p.name]
		happened, match := "still running", "yes"
		e, ok := d.predicted[p.name]
		evictExpected := ok && e.When != taints.EvictNever
		if !st.deleting.IsZero() {
			happened = fmt.Sprintf("evicted +%.1fs", st.deleting.Sub(injected).Seconds())
			if !evictExpected || st.deleting.Sub(tainted.Add(e.After)).Abs() > 2*time.Second {
				match = "NO"
			}
		} else if evictExpected {
			match = "NO"
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", namespace, p.name, p.node, d.prediction(p.name, injected, tainted), happened, match)
	}
	tw.Flush()
	fmt.Fprintln(d.out)
}

// poll is testcp.Poll at the demo's pace; an error from ok ends it at once.
func poll(ctx context.Context, timeout time.Duration, ok func() (bool, error)) error {
	var failed error
	err := testcp.Poll(ctx, timeout, 200*time.Millisecond, func() (bool, error) {
		done, err := ok()
		if err != nil {
			failed = err
			return true, nil
		}
		return done, nil
	})
	if failed != nil {
		return failed
	}
	return err
}

func conditionStatus(n *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	if c := taints.FindCondition(n, t); c != nil {
		return c.Status
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// ourTaints formats the node's selftaint.io taints.
func ourTaints(n *corev1.Node) string {
	var out []string
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, "selftaint.io/") {
			out = append(out, taints.Format(t))
		}
	}
	return strings.Join(out, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none of ours"
	}
	return s
}
