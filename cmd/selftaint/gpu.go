package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes/gpu"
)

const gpuUsage = `Usage:
  selftaint gpu clear NODE (--gpu GPU [--gpu GPU ...] | --all) [--wait[=60s]] [--by WHO]
                      [--kubeconfig FILE] [--context C] [--cluster C] [--user U] [--request-timeout D]

A GPU that raised an Xid needing a reset stays failed until the reset is
seen, across agent restarts: the gpu probe keeps what it saw in the Node
annotation ` + agent.StateAnnotationPrefix + `gpu. Once the GPU is fixed, "gpu clear" asks
the agent on NODE to forget what it learned about the GPUs named (by UUID, as
the condition's message and nvidia-smi -L show them, or by PCI address,
0000:07:00.0, which also names a GPU NVML no longer sees; --all for every
GPU) before now. It writes the request ` + agent.ClearAnnotationPrefix + `gpu on the Node; the agent
acts on it once, removes it, and records an Event on the Node:
ProbeStateCleared with what was cleared, or ClearRejected saying why not (a
rejected request is removed too). The probe's next run publishes the result
and the taint lifts as the condition's damping allows.

--wait waits (60s, or --wait=2m) for the agent's answer and prints it; the
exit status is 1 when the request was rejected or not answered in time.
--kubeconfig defaults to $KUBECONFIG, else ~/.kube/config; --context,
--cluster, --user and --request-timeout are kubectl's.
`

// defaultWait is how long --wait alone waits.
const defaultWait = 60 * time.Second

// gpuClearArgs is a parsed `selftaint gpu clear` command line.
type gpuClearArgs struct {
	node string
	// targets are the GPU UUIDs or PCI addresses, or [agent.ClearAll].
	targets []string
	wait    time.Duration // zero: do not wait
	by      string
	kube    kubeFlags
}

// listFlag is a flag that may be given many times; commas also separate
// values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			return fmt.Errorf("empty value in %q", v)
		}
		*l = append(*l, s)
	}
	return nil
}

// waitFlag is --wait (defaultWait) or --wait=DURATION.
type waitFlag struct{ d time.Duration }

func (w *waitFlag) String() string   { return w.d.String() }
func (w *waitFlag) IsBoolFlag() bool { return true }

func (w *waitFlag) Set(v string) error {
	switch v {
	case "true":
		w.d = defaultWait
		return nil
	case "false":
		w.d = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 60s or 2m, got %q", v)
	}
	w.d = d
	return nil
}

// defaultClearedBy is who asks, for the request's "by": the user's name if
// known.
func defaultClearedBy() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "selftaint gpu clear"
}

func runGPU(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	prog := progOf(ctx)
	usage := forProg(prog, gpuUsage)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "clear":
		return runGPUClear(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	default:
		fmt.Fprintf(stderr, "%s gpu: unknown command %q\n\n%s", prog, args[0], usage)
		return errUsage
	}
}

// parseGPUClear parses `selftaint gpu clear`'s arguments (flags before or
// after NODE); prog is the program's name for usage.
func parseGPUClear(prog string, args []string, stderr io.Writer) (gpuClearArgs, error) {
	fs := flag.NewFlagSet(prog+" gpu clear", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, forProg(prog, gpuUsage), "\nFlags:\n"); fs.PrintDefaults() }
	var (
		gpus listFlag
		wait waitFlag
		out  gpuClearArgs
	)
	fs.Var(&gpus, "gpu", "the UUID (GPU-...) or PCI address (0000:07:00.0) of a GPU to clear; repeat, or separate with commas, for more")
	all := fs.Bool("all", false, "clear every GPU the probe holds")
	fs.Var(&wait, "wait", "wait for the agent's answer: --wait (60s) or --wait=DURATION")
	fs.StringVar(&out.by, "by", defaultClearedBy(), "who asks, recorded in the request and the agent's Event")
	kf := addKubeFlags(fs, "accepted as kubectl takes it, and unused: this command works on a Node, which has no namespace, and --wait reads its Events in default, where Node Events are recorded")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return gpuClearArgs{}, err
	}
	out.kube = *kf
	if out.node, err = oneNode(fs, pos); err != nil {
		return gpuClearArgs{}, err
	}
	switch {
	case *all && len(gpus) > 0:
		return gpuClearArgs{}, errors.New("give --gpu UUID or --all, not both")
	case *all:
		out.targets = []string{agent.ClearAll}
	case len(gpus) == 0:
		return gpuClearArgs{}, errors.New("give the GPUs to clear with --gpu UUID (repeat for more), or --all")
	case slices.Contains(gpus, agent.ClearAll):
		return gpuClearArgs{}, fmt.Errorf("--gpu %s: use --all to clear every GPU", agent.ClearAll)
	default:
		slices.Sort(gpus)
		out.targets = slices.Compact(gpus)
	}
	if strings.TrimSpace(out.by) == "" {
		return gpuClearArgs{}, errors.New("--by must not be empty")
	}
	out.wait = wait.d
	return out, nil
}

func runGPUClear(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseGPUClear(progOf(ctx), args, stderr)
	if err != nil {
		return err
	}
	client, err := operatorClient(&a.kube, "selftaint-gpu")
	if err != nil {
		return err
	}
	return gpuClear(ctx, client, a, time.Now(), stdout)
}

// gpuClear writes the clear request for a.targets on a.node, made at now,
// and with a.wait waits for the agent's answer.
func gpuClear(ctx context.Context, client typedcorev1.CoreV1Interface, a gpuClearArgs, now time.Time, stdout io.Writer) error {
	key := agent.ClearAnnotation(gpu.NameFatal)
	req := agent.ClearRequest{Targets: a.targets, RequestedAt: now.UTC().Format(time.RFC3339Nano), By: a.by}
	value, err := req.Encode()
	if err != nil {
		return err
	}
	nodes := client.Nodes()
	n, err := nodes.Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", a.node, err)
	}
	if old, ok := n.Annotations[key]; ok {
		fmt.Fprintf(stdout, "replacing a request the agent has not taken yet: %s\n", old)
	}
	// A merge patch on this one annotation: nothing else is touched.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return fmt.Errorf("building the patch: %w", err)
	}
	if _, err := nodes.Patch(ctx, a.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "selftaint-gpu"}); err != nil {
		return fmt.Errorf("writing the clear request on node %s: %w", a.node, err)
	}
	what := "GPU(s) " + strings.Join(a.targets, ", ")
	if slices.Equal(a.targets, []string{agent.ClearAll}) {
		what = "every GPU"
	}
	fmt.Fprintf(stdout, "asked the agent on node %s to clear what its %s probe holds about %s, as of %s\n", a.node, gpu.NameFatal, what, req.RequestedAt)
	fmt.Fprintf(stdout, "annotation %s=%s\n", key, value)
	if a.wait <= 0 {
		fmt.Fprintf(stdout, "the agent answers with an Event on the node (ProbeStateCleared, or ClearRejected):\n"+
			"  kubectl get events -n %s --field-selector involvedObject.name=%s,reason=%s\n"+
			"  kubectl describe node %s\n", metav1.NamespaceDefault, a.node, agent.ReasonProbeStateCleared, a.node)
		return nil
	}
	return waitClearAnswer(ctx, client, a.node, key, value, req, a.wait, stdout)
}

// waitClearAnswer waits up to wait for the agent to take the request
// (key=value) off node and for its Event about req, and prints it. A
// rejection is an error.
func waitClearAnswer(ctx context.Context, client typedcorev1.CoreV1Interface, node, key, value string, req agent.ClearRequest, wait time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	taken := false
	for {
		if !taken {
			n, err := client.Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil {
				taken = n.Annotations[key] != value
			}
		}
		if taken {
			if e, ok := clearAnswer(ctx, client, node, key, req); ok {
				if e.Reason == agent.ReasonClearRejected {
					return fmt.Errorf("the agent on node %s rejected the request: %s", node, e.Message)
				}
				fmt.Fprintf(stdout, "%s: %s\n", e.Reason, e.Message)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if !taken {
				return fmt.Errorf("the agent on node %s did not take the request within %s; it stays on the Node until the agent does (is selftaint running there, with its %s probe?)", node, wait, gpu.NameFatal)
			}
			return fmt.Errorf("the request is gone from node %s, but no Event about it came within %s (was it replaced by another?); see kubectl describe node %s", node, wait, node)
		case <-tick.C:
		}
	}
}

// clearAnswer finds the agent's Event about the request req (its key and
// requestedAt) on node.
func clearAnswer(ctx context.Context, client typedcorev1.CoreV1Interface, node, key string, req agent.ClearRequest) (corev1.Event, bool) {
	evs, err := client.Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": node}.String(),
	})
	if err != nil {
		return corev1.Event{}, false
	}
	for _, e := range evs.Items {
		if (e.Reason == agent.ReasonProbeStateCleared || e.Reason == agent.ReasonClearRejected) &&
			strings.Contains(e.Message, key) && strings.Contains(e.Message, " at "+req.RequestedAt) {
			return e, true
		}
	}
	return corev1.Event{}, false
}
