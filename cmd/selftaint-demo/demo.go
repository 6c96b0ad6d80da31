package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// demo is one run: the control plane, the virtual nodes, the drill.
type demo struct {
	opts options
	cast cast
	log  *printer

	cp     *testcp.ControlPlane
	client kubernetes.Interface
	config string // the config file's path
	// predicted is explain's verdict on each pod, by name, for a NoExecute
	// taint on its node.
	predicted map[string]taints.Eviction
}

func (d *demo) run(ctx context.Context) (err error) {
	d.log.plain("selftaint demo: NoExecute faults on virtual nodes under a fleet budget, then maintenance drains, on a real local control plane")
	d.log.plain("")
	var stopVirtual func()
	defer func() {
		d.log.say("cleaning up: stopping the virtual nodes and the control plane")
		if stopVirtual != nil {
			stopVirtual()
		}
		if d.cp != nil {
			if cerr := d.cp.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		d.log.say("done")
	}()

	if err := d.startControlPlane(ctx); err != nil {
		return err
	}
	if stopVirtual, err = d.startVirtual(); err != nil {
		return err
	}
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	if err := d.createPods(ctx); err != nil {
		return err
	}
	if err := d.createWorkloads(ctx); err != nil {
		return err
	}
	if err := d.explainFirst(ctx); err != nil {
		return err
	}
	d.log.plain("")
	d.log.plain("Part 1: NoExecute under the fleet budget (coordinator.maxNoExecute: 1).")
	v := newView(d.cast)
	if err := d.drill(ctx, v); err != nil {
		return err
	}
	d.summary(v)
	if err := d.maintPart(ctx, v); err != nil {
		return err
	}
	d.maintSummary(v)
	if d.opts.keep {
		d.log.say("--keep: everything stays up until Ctrl-C (KUBECONFIG=%s)", d.cp.KubeconfigPath)
		<-ctx.Done()
	}
	return nil
}

func (d *demo) startControlPlane(ctx context.Context) error {
	d.log.say("starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 ...")
	cp, err := testcp.New(ctx, testcp.Options{ControllerManager: true, Scheduler: true})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	d.cp, d.client = cp, cp.Client()
	d.log.say("control plane up. To look around meanwhile: export KUBECONFIG=%s", cp.KubeconfigPath)
	if _, err := d.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coordinatorNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", coordinatorNamespace, err)
	}
	d.config = filepath.Join(cp.Dir, "demo-config.yaml")
	if err := os.WriteFile(d.config, []byte(demoConfig), 0o600); err != nil {
		return err
	}
	d.log.say("the config every agent and the coordinator read (%s):", d.config)
	d.log.block(strings.Split(strings.TrimRight(demoConfig, "\n"), "\n"))
	return nil
}

// startVirtual runs `selftaint virtual` for the drill's nodes, with a
// coordinator in the same process, and returns how to stop it.
func (d *demo) startVirtual() (func(), error) {
	args := []string{"virtual", fmt.Sprintf("--nodes=%d", len(d.cast.allNodes())), "--name-prefix=vnode-", "--coordinator", "--config=" + d.config,
		"--kubeconfig=" + d.cp.KubeconfigPath, "--log-level=warn", "--stats-interval=0"}
	d.log.say("$ selftaint %s", strings.Join(shownArgs(args[:5]), " "))
	logPath := filepath.Join(d.cp.Dir, "selftaint-virtual.log")
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

// waitReady waits for the virtual nodes to be Ready and for the
// coordinator to have written the guard: before that, no node could get a
// grant.
func (d *demo) waitReady(ctx context.Context) error {
	names := d.cast.allNodes()
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
		return fmt.Errorf("waiting for the virtual nodes to be Ready (log: %s/selftaint-virtual.log): %w", d.cp.Dir, err)
	}
	d.log.say("%s Ready: registered, leases renewing, the node lifecycle controller lifted not-ready", strings.Join(names, ", "))
	err = poll(ctx, time.Minute, func() (bool, error) {
		_, err := d.client.CoreV1().ConfigMaps(coordinatorNamespace).Get(ctx, fleet.DefaultGuardName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the coordinator to write the guard %s/%s (log: %s/selftaint-virtual.log): %w", coordinatorNamespace, fleet.DefaultGuardName, d.cp.Dir, err)
	}
	d.log.say("coordinator elected leader and wrote the disruption guard (%s/%s): grants can be made", coordinatorNamespace, fleet.DefaultGuardName)
	return nil
}

func (d *demo) createPods(ctx context.Context) error {
	if _, err := d.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	for _, p := range d.cast.pods {
		if _, err := d.client.CoreV1().Pods(namespace).Create(ctx, podObject(p), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.name, err)
		}
		d.log.say("pod %s/%s on %s: %s", namespace, p.name, p.node, p.about)
	}
	err := poll(ctx, time.Minute, func() (bool, error) {
		list, err := d.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "!" + partLabel})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(d.cast.pods), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods to run: %w", err)
	}
	d.log.say("all pods scheduled by kube-scheduler and Running on their virtual nodes")
	d.log.say("and for part 2, the drains:")
	return nil
}

// podObject is the Pod for p, pinned to its node.
func podObject(p demoPod) *corev1.Pod {
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
	return pod
}

// explainFirst shows what explain says a NoExecute taint on the first
// node would do, and keeps its verdicts on every node's pods.
func (d *demo) explainFirst(ctx context.Context) error {
	proposal := "--taint=" + taintKey + ":NoExecute"
	first := d.cast.faults[0].node
	d.log.plain("")
	d.log.say("what would a NoExecute taint on %s do? (nothing is tainted yet)", first)
	_, lines, err := d.selftaint(ctx, "explain", first, proposal, "--config="+d.config)
	d.log.lines(lines)
	if err != nil {
		return err
	}
	d.predicted = map[string]taints.Eviction{}
	for _, node := range d.cast.nodes() {
		out, _, err := d.selftaint(ctx, "explain", node, proposal, "--output=json")
		if err != nil {
			return err
		}
		var evs []taints.Eviction
		if err := json.Unmarshal(out, &evs); err != nil {
			return fmt.Errorf("reading explain's output: %w", err)
		}
		for _, e := range evs {
			d.predicted[e.Name] = e
		}
	}
	return nil
}

// selftaint runs one selftaint command against the demo's cluster and
// returns its output, and the timeline's lines that show it: the command,
// stamped now, then its output.
func (d *demo) selftaint(ctx context.Context, args ...string) ([]byte, []string, error) {
	shown := strings.Join(shownArgs(args), " ")
	lines := []string{d.log.line("$ selftaint %s", shown)}
	cmd := exec.CommandContext(ctx, d.opts.selftaint, append(args, "--kubeconfig="+d.cp.KubeconfigPath)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, lines, fmt.Errorf("selftaint %s: %w: %s", shown, err, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		lines = append(lines, indent+l)
	}
	return stdout.Bytes(), lines, nil
}

// followCommand runs a selftaint command that takes a while, sending its
// output, stdout and stderr as they come, to output line by line, and
// closes output once the command has exited. It returns its exit code;
// an error only where it could not run.
func (d *demo) followCommand(ctx context.Context, output chan<- string, args ...string) (int, error) {
	defer close(output)
	cmd := exec.CommandContext(ctx, d.opts.selftaint, append(args, "--kubeconfig="+d.cp.KubeconfigPath)...)
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("selftaint %s: %w", strings.Join(args, " "), err)
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		output <- sc.Text()
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); errors.As(err, &exit) {
		return exit.ExitCode(), nil
	} else if err != nil {
		return 0, fmt.Errorf("selftaint %s: %w", strings.Join(args, " "), err)
	}
	return 0, nil
}

// shownArgs is how the timeline shows a command's arguments: the config by
// its file name, values with spaces quoted.
func shownArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case ok && k == "--config":
			out[i] = k + "=" + filepath.Base(v)
		case ok && strings.Contains(v, " "):
			out[i] = k + "=" + strconv.Quote(v)
		default:
			out[i] = a
		}
	}
	return out
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
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
