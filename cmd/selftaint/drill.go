package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent/config"
	agentdrill "github.com/selftaint/selftaint/agent/drill"
	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

const drillUsage = `Usage: selftaint drill FILE.yaml [--report out.json] [--junit out.xml] [--keep] [--quiet]
                       [--kube-bin-dir DIR] [--start-timeout 3m]
                       [--kubeconfig K] [--context C] [--cluster C] [--user U]

Runs the drill FILE describes: a scenario of workloads, faults, NotReady
nodes, drains and coordinator failures on a timeline, with expectations
judged on every version of the objects it watched. Without --kubeconfig,
--context, --cluster or --user it starts its own control plane (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler on loopback; the
binaries make builds, found with --kube-bin-dir), showing every 10 s which
component it still waits for, within --start-timeout; with them, it runs in
that cluster and touches only the nodes it registers or is given.

It prints a live view, then a table of the expectations with what was
measured; --report writes the JSON report, --junit a JUnit XML file. It
cleans up everything it created, also on Ctrl-C (a second Ctrl-C abandons
the cleanup); --keep first holds it all up, once judged, until Ctrl-C.

Exit status: 0 every expectation held; 1 one was breached; 2 the file or a
flag is wrong (nothing ran); 3 the drill could not run to its end.
`

// exitCodeError is an error whose command exits with code (the message,
// if any, is already printed).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// drillNamespaceUsage is -n/--namespace's help for drill.
const drillNamespaceUsage = "accepted as kubectl takes it, and unused: the drill's workloads go to its own namespace, selftaint-drill-<name>, unless a manifest names one"

// drillFlags are `selftaint drill`'s flags besides kubectl's.
type drillFlags struct {
	report, junit, selftaint, logLevel, kubeBinDir string
	quiet, keep                                    bool
	startTimeout                                   time.Duration
}

func runDrill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	prog := progOf(ctx)
	fs := flag.NewFlagSet(prog+" drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, forProg(prog, drillUsage), "\nFlags:\n"); fs.PrintDefaults() }
	var f drillFlags
	kf := addKubeFlags(fs, drillNamespaceUsage)
	fs.StringVar(&f.report, "report", "", "write the JSON report to this file")
	fs.StringVar(&f.junit, "junit", "", "write a JUnit XML file for CI systems")
	fs.StringVar(&f.selftaint, "selftaint", "", "the selftaint binary the coordinator processes run (default: this one)")
	fs.StringVar(&f.logLevel, "log-level", "error", "log level of the virtual nodes' logs on stderr")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the closing table")
	fs.StringVar(&f.kubeBinDir, "kube-bin-dir", "", "where the embedded control plane's kube-apiserver, kube-controller-manager and kube-scheduler are (default $KUBE_BIN_DIR, else beside this binary, else the repository's bin/ that make builds); etcd is $ETCD_BIN or on $PATH")
	fs.DurationVar(&f.startTimeout, "start-timeout", agentdrill.DefaultStartTimeout, "how long the embedded control plane may take to start, every component together (a loaded machine takes minutes); on a timeout the drill says which component was slow")
	fs.BoolVar(&f.keep, "keep", false, "once the expectations are judged, keep the cluster, virtual nodes and workloads up until Ctrl-C (to look around with kubectl), then clean up")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "selftaint drill: want one FILE, got %d arguments %v\n", len(pos), pos)
		return errUsage
	}
	if f.startTimeout <= 0 {
		fmt.Fprintf(stderr, "selftaint drill: --start-timeout %s: want a positive duration\n", f.startTimeout)
		return errUsage
	}
	s, err := tdrill.Load(pos[0], agentdrill.Check)
	if err == nil {
		// cluster.config as the agents will load it, each error at its
		// line of the file, before anything starts.
		err = agentdrill.CheckConfig(s, pos[0])
	}
	if err != nil {
		printLines(stderr, "selftaint drill: ", err.Error())
		return &exitCodeError{tdrill.ExitBadFile}
	}
	logger, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return errors.Join(errUsage, err)
	}
	opts := agentdrill.Options{
		Scenario: s, File: pos[0], Selftaint: f.selftaint, Logger: logger,
		Evaluate: tdrill.Evaluate, KubeBinDir: kubeBinDir(f.kubeBinDir, os.Getenv("KUBE_BIN_DIR"), os.Executable),
		StartTimeout: f.startTimeout,
	}
	if kf.existing() {
		// One kubeconfig file holding just the cluster and user the flags
		// select, for the drill's own clients, the commands it runs and
		// its coordinator processes alike.
		dir, err := os.MkdirTemp("", "selftaint-drill-kubeconfig-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "kubeconfig")
		if err := kf.writeSelected(path); err != nil {
			return err
		}
		rc, err := (&kubeFlags{kubeconfig: path, requestTimeout: kf.requestTimeout}).restConfig("selftaint-drill")
		if err != nil {
			return err
		}
		opts.Existing, opts.RESTConfig, opts.Kubeconfig = true, rc, path
	}
	var out io.Writer
	if !f.quiet {
		out = &syncWriter{w: stdout}
	}
	opts.Out = out
	opts.Actions = &drillActions{out: out}
	abort, stopSignals := secondInterrupt(ctx, out)
	defer stopSignals()
	opts.Abort = abort
	if f.keep {
		opts.Keep = func(ctx context.Context, results []tdrill.Result, kubeconfig string) {
			held := 0
			for _, r := range results {
				if r.Passed {
					held++
				}
			}
			w := io.Writer(stdout)
			if out != nil {
				w = out // the live view's writer: one writer at a time
			}
			fmt.Fprintf(w, "--keep: %d of %d expectations held (the table follows the cleanup). Everything stays up until Ctrl-C:\n  export KUBECONFIG=%s\n", held, len(results), kubeconfig)
			<-ctx.Done()
		}
	}
	o := agentdrill.Run(ctx, opts)
	return finishDrill(o, f, stdout, stderr)
}

// finishDrill prints the table and writes the report files. A drill that
// did not run to its end says why on stderr, in one line (a control plane
// that did not start: which component, why, and its kept log); one
// refused as a bad file (nothing ran) prints no table.
func finishDrill(o agentdrill.Outcome, f drillFlags, stdout, stderr io.Writer) error {
	var startErr *agentdrill.StartError
	switch {
	case errors.As(o.Err, &startErr):
		fmt.Fprintf(stderr, "selftaint drill: %s\n", startErr.Line())
	case o.Report.Error != "":
		printLines(stderr, "selftaint drill: ", o.Report.Error)
	}
	if o.Code != tdrill.ExitBadFile {
		fmt.Fprint(stdout, tdrill.Table(&o.Report))
	}
	var errs []error
	if f.report != "" {
		errs = append(errs, writeReportFile(f.report, func(w io.Writer) error { return tdrill.WriteJSON(w, &o.Report) }))
	}
	if f.junit != "" {
		errs = append(errs, writeReportFile(f.junit, func(w io.Writer) error { return tdrill.WriteJUnit(w, &o.Report) }))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(stderr, "selftaint drill: %v\n", err)
		return &exitCodeError{max(o.Code, tdrill.ExitNotRun)}
	}
	if o.Code == 0 {
		return nil
	}
	return &exitCodeError{o.Code}
}

// printLines writes each line of text to w after prefix.
func printLines(w io.Writer, prefix, text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", prefix, l)
	}
}

func writeReportFile(path string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// secondInterrupt returns a channel closed on the second SIGINT/SIGTERM
// (the first cancels ctx: main's NotifyContext), which abandons the
// cleanup.
func secondInterrupt(ctx context.Context, out io.Writer) (<-chan struct{}, func()) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	abort := make(chan struct{})
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case <-sig:
				n++
				if n == 1 {
					if out != nil {
						fmt.Fprintln(out, "interrupted: stopping the drill and cleaning up (interrupt again to abandon the cleanup)")
					}
					continue
				}
				close(abort)
				return
			}
		}
	}()
	var once sync.Once
	return abort, func() { once.Do(func() { signal.Stop(sig); close(done) }) }
}

// syncWriter serialises writes from the drill's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// drillActions are the operator commands' own code, as a drill's steps run
// them: `selftaint fault`, `selftaint drain`, `selftaint explain`.
type drillActions struct {
	out io.Writer // the live view (nil: quiet); each command's output is indented there
}

// command runs one operator command's function, its output indented in the
// live view.
func (a *drillActions) command(ctx context.Context, name string, fn func(context.Context, []string, io.Writer, io.Writer) error, args []string) error {
	var b bytes.Buffer
	err := fn(ctx, args, &b, &b)
	if a.out != nil {
		for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			if l != "" {
				fmt.Fprintf(a.out, "            | %s\n", l)
			}
		}
	}
	if err != nil && errors.Is(err, errUsage) {
		return fmt.Errorf("selftaint %s %s: %s", name, strings.Join(args, " "), strings.TrimSpace(b.String()))
	}
	return err
}

// kubeconfigArgs are the --kubeconfig flag for a command ("" = default).
func kubeconfigArgs(kubeconfig string) []string {
	if kubeconfig == "" {
		return nil
	}
	return []string{"--kubeconfig", kubeconfig}
}

func (a *drillActions) InjectFault(ctx context.Context, kubeconfig, configPath, node string, f tdrill.FaultStep, detail bool) error {
	if !detail {
		// Quiet, and without the NoExecute standing (a read of every
		// Node and grant, per node of a storm).
		quiet := &drillActions{}
		return quiet.command(ctx, "fault inject", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return faultInject(ctx, args, stdout, stderr, noStanding)
		}, faultInjectArgs(kubeconfig, configPath, node, f))
	}
	return a.command(ctx, "fault inject", runFaultInject, faultInjectArgs(kubeconfig, configPath, node, f))
}

// faultInjectArgs is the `selftaint fault inject` command line of a fault
// step on node.
func faultInjectArgs(kubeconfig, configPath, node string, f tdrill.FaultStep) []string {
	args := []string{node, "--config", configPath, "--injected-by", "selftaint drill"}
	args = append(args, kubeconfigArgs(kubeconfig)...)
	if f.For.Duration > 0 {
		args = append(args, "--for", f.For.Duration.String())
	}
	if f.GPUXid != 0 {
		// The Xid sets the condition, its status, reason and message, as
		// the GPU probe would.
		return append(args, "--gpu-xid", strconv.Itoa(f.GPUXid))
	}
	args = append(args, "--condition", f.Condition)
	for _, fl := range []struct{ name, value string }{{"--status", f.Status}, {"--reason", f.Reason}, {"--message", f.Message}} {
		if fl.value != "" {
			args = append(args, fl.name, fl.value)
		}
	}
	return args
}

func (a *drillActions) ClearFaults(ctx context.Context, kubeconfig, configPath, node string) error {
	args := append([]string{node, "--all", "--config", configPath}, kubeconfigArgs(kubeconfig)...)
	return a.command(ctx, "fault clear", runFaultClear, args)
}

func (a *drillActions) FaultCondition(configPath string, f tdrill.FaultStep) (corev1.NodeConditionType, corev1.ConditionStatus, error) {
	env, err := (&faultFlags{configPath: configPath}).env()
	if err != nil {
		return "", "", err
	}
	status := corev1.ConditionStatus(f.Status)
	if status == "" {
		status = corev1.ConditionTrue
	}
	if f.GPUXid != 0 {
		xf, err := env.cfg.GPUXidFault(uint64(f.GPUXid), 0, time.Now())
		if err != nil {
			return "", "", fmt.Errorf("gpuXid %d: %w", f.GPUXid, err)
		}
		return xf.Condition, xf.Status, nil
	}
	if c, ok := env.probeConditions[f.Condition]; ok {
		return c, status, nil
	}
	return corev1.NodeConditionType(f.Condition), status, nil
}

func (a *drillActions) Drain(ctx context.Context, kubeconfig string, nodes []string, selector string, d tdrill.DrainStep) error {
	args := append([]string{"--reason", d.Reason}, kubeconfigArgs(kubeconfig)...)
	if d.Deadline.Duration > 0 {
		args = append(args, "--deadline", d.Deadline.Duration.String())
	}
	if d.OnDeadline != "" {
		args = append(args, "--on-deadline", d.OnDeadline)
	}
	if d.Done {
		return a.drainInBatches(ctx, kubeconfig, nodes, d.MaxParallel, args)
	}
	if selector != "" {
		return a.command(ctx, "drain", runDrain, append(args, "--selector", selector, "--max-parallel", strconv.Itoa(d.MaxParallel)))
	}
	return a.command(ctx, "drain", runDrain, append(args, nodes...))
}

// drainInBatches drains nodes maxParallel at a time (all at once for 0):
// each batch requested and followed until Drained, then ended (`drain
// --done`, uncordoned) before the next: a rolling maintenance that gives
// each node back, where `drain --selector --max-parallel` keeps every
// Drained node cordoned until the end.
func (a *drillActions) drainInBatches(ctx context.Context, kubeconfig string, nodes []string, maxParallel int, args []string) error {
	if maxParallel <= 0 {
		maxParallel = len(nodes)
	}
	for batch := range slices.Chunk(nodes, maxParallel) {
		if err := a.command(ctx, "drain", runDrain, append(append(slices.Clone(args), "--wait"), batch...)); err != nil {
			return err
		}
		if err := a.EndDrains(ctx, kubeconfig, batch); err != nil {
			return err
		}
	}
	return nil
}

func (a *drillActions) EndDrains(ctx context.Context, kubeconfig string, nodes []string) error {
	args := append(append([]string{"--done"}, kubeconfigArgs(kubeconfig)...), nodes...)
	return a.command(ctx, "drain", runDrain, args)
}

// Explain is explain's verdict for the pods on node once the proposed
// taints go on, as the coordinator will allow them: asked with the node's
// own condition counted (readStanding), a NoExecute taint the disruption
// guard then holds does not go on, and no pod is evicted for it.
func (a *drillActions) Explain(ctx context.Context, kubeconfig, configPath, node string, proposed []corev1.Taint, now time.Time) ([]taints.Eviction, error) {
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, err
	}
	kf := &kubeFlags{kubeconfig: kubeconfig}
	client, leases, err := operatorClients(kf, "selftaint-drill")
	if err != nil {
		return nil, err
	}
	n, err := client.Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", node, err)
	}
	pods, err := podsOnNode(ctx, client, node)
	if err != nil {
		return nil, err
	}
	st, err := readStanding(ctx, client, leases, cfg, kf.coordinatorNamespace(cfg), n, proposedStatuses(cfg.TaintRules(), n, proposed), now)
	if err != nil {
		return nil, err
	}
	considered, _ := withProposed(n.Spec.Taints, withoutTaints(proposed, st.withheld(proposed)), now)
	return taints.ExplainWith(considered, pods, now, taints.ExplainOptions{}), nil
}

// kubeBinDir is where the embedded control plane's binaries are: the
// flag, else $KUBE_BIN_DIR, else the directory of this executable when it
// holds kube-apiserver (bin/, as make builds them, or wherever the
// binaries were installed together), else "" for testcp's lookup (the
// repository's bin/).
func kubeBinDir(flagValue, env string, executable func() (string, error)) string {
	switch {
	case flagValue != "":
		return flagValue
	case env != "":
		return env
	}
	exe, err := executable()
	if err != nil {
		return ""
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return ""
	}
	dir := filepath.Dir(exe)
	if fi, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil && !fi.IsDir() {
		return dir
	}
	return ""
}
