// Package drill is the half of `selftaint drill` that talks to a cluster:
// it starts the drill's environment (an embedded control plane, or an
// existing cluster it is given), runs the scenario's virtual nodes in this
// process and its coordinator replicas as processes it can kill and pause,
// applies the workloads and waits for them, runs the steps on their
// timeline, watches everything the expectations judge into a Record, and
// cleans up all it created, also when it is interrupted.
//
// What a verdict is lives in taints/drill (pure functions over the
// Record); the operator actions a step takes (inject a fault, request a
// drain, ask explain) are the operator commands' own code, passed in as
// Actions by cmd/selftaint, so a drill does exactly what a person typing
// those commands would.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/selftaint/selftaint/taints"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// FieldManager is the field manager of everything the drill writes itself.
const FieldManager = "selftaint-drill"

// Actions are the operator commands a step runs, as `selftaint fault`,
// `selftaint drain` and `selftaint explain` run them. kubeconfig is the
// drill's cluster's (a file path; "" means the default loading rules),
// configPath the agents' config file the drill wrote.
type Actions interface {
	// InjectFault writes the fault on node, lasting f.For; with detail it
	// shows all the command says (what the fault means for the NoExecute
	// rules too), without it nothing (a step on many nodes shows one).
	InjectFault(ctx context.Context, kubeconfig, configPath, node string, f tdrill.FaultStep, detail bool) error
	// ClearFaults removes every fault annotation on node.
	ClearFaults(ctx context.Context, kubeconfig, configPath, node string) error
	// FaultCondition is the condition and status a fault step sets (a
	// probe name or a GPU Xid resolved as the agents resolve it).
	FaultCondition(configPath string, f tdrill.FaultStep) (corev1.NodeConditionType, corev1.ConditionStatus, error)
	// Drain asks the coordinator to drain nodes (a rollout with
	// d.MaxParallel, following it until each is Drained); with d.Done it
	// also ends each drain once Drained.
	Drain(ctx context.Context, kubeconfig string, nodes []string, selector string, d tdrill.DrainStep) error
	// EndDrains removes the operator's maintenance request from nodes.
	EndDrains(ctx context.Context, kubeconfig string, nodes []string) error
	// Explain is explain's verdict on every pod bound to node with the
	// proposed taints added to its own, those the coordinator will not
	// allow left out: a NoExecute taint whose condition the disruption
	// guard holds once the node's own condition is counted.
	Explain(ctx context.Context, kubeconfig, configPath, node string, proposed []corev1.Taint, now time.Time) ([]taints.Eviction, error)
}

// Options are one drill run's.
type Options struct {
	Scenario *tdrill.Scenario
	// File is the drill file's path (workload files are relative to it).
	File string
	// Existing: run against the cluster of RESTConfig/Kubeconfig instead
	// of an embedded control plane.
	Existing   bool
	RESTConfig *rest.Config
	// Kubeconfig is the existing cluster's kubeconfig path, passed to the
	// actions and the coordinator processes ("" = default loading rules).
	Kubeconfig string
	// Selftaint is the binary the coordinator replicas run.
	Selftaint string
	// KubeBinDir is where the embedded control plane's kube-apiserver,
	// kube-controller-manager and kube-scheduler are (empty: testcp's
	// lookup, $KUBE_BIN_DIR or the repository's bin/).
	KubeBinDir string
	// StartTimeout bounds the embedded control plane's start, every
	// component together (zero: testcp.DefaultStartTimeout).
	StartTimeout time.Duration
	Actions      Actions
	// Evaluate judges the Record (taints/drill's Evaluate).
	Evaluate func(*tdrill.Scenario, *tdrill.Record) []tdrill.Result
	// Keep, when set, is called once the expectations are judged and
	// before anything is cleaned up, with the verdicts so far and the
	// kubeconfig of the drill's cluster; the cleanup waits until it
	// returns (--keep: look around until Ctrl-C).
	Keep func(ctx context.Context, results []tdrill.Result, kubeconfig string)
	// Out gets the live view's lines; nil shows nothing. While the drill
	// watches, lines wait at least half a second, to print in the order
	// they were seen; a fault or drain step prints what was said before it
	// runs its Actions, whose output (to the same writer) then follows.
	Out io.Writer
	// Logger gets the virtual nodes' and the runner's logs (default:
	// discarded).
	Logger *slog.Logger
	// Abort, when it closes, abandons the cleanup (a second Ctrl-C).
	Abort <-chan struct{}
	// Now defaults to time.Now.
	Now func() time.Time
}

// Outcome is what a run ends with.
type Outcome struct {
	Report tdrill.Report
	Record tdrill.Record
	Code   int
	// Err is why the drill did not run to its end (Report.Error's), nil
	// when it did; a *StartError when its control plane did not start.
	Err error
}

// BadFileError is a scenario the drill refuses before creating anything:
// the CLI exits ExitBadFile.
type BadFileError struct {
	Field string
	Err   error
}

func (e *BadFileError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *BadFileError) Unwrap() error { return e.Err }

// errTimeout is a drill that ran out of time: its expectations are judged
// on what was seen. With errUnfinished the timeline had not ended then.
var (
	errTimeout    = errors.New("the drill's timeout passed")
	errUnfinished = errors.New("before its last step ended")
)

// notRun: the drill did not run to its end (a timeout before the last
// step ended counts).
func notRun(err error) bool {
	return err != nil && (!errors.Is(err, errTimeout) || errors.Is(err, errUnfinished))
}

// runner is one drill run's state.
type runner struct {
	opts Options
	s    *tdrill.Scenario
	now  func() time.Time
	log  *slog.Logger
	view *view

	env       *environment
	plan      *plan
	virtual   *virtualFleet
	coord     *coordinators
	applied   []appliedObject
	recording recording
	// realNodes are the existing cluster's nodes the drill was given.
	realNodes map[string]bool

	mu      sync.Mutex // guards created and the fields below
	created created
	steps   []tdrill.StepRecord
	preds   []tdrill.Prediction
	t0      time.Time
	// pending counts the things started that end later (a NotReady, a
	// pause, a killed leader's restart); inForce is when the last fault
	// ends.
	pending sync.WaitGroup
	inForce time.Time
}

// Run runs one drill and cleans up after it. ctx cancelled (Ctrl-C) stops
// the drill where it is and cleans up; the outcome then has ExitNotRun.
func Run(ctx context.Context, opts Options) Outcome {
	r := newRunner(opts)
	rep := tdrill.Report{
		Schema: tdrill.ReportSchema, Drill: opts.Scenario.Name, File: opts.File,
		Cluster: "embedded", Started: r.now(),
	}
	if opts.Existing {
		rep.Cluster = "existing"
	}
	err := r.run(ctx, &rep)
	rec := r.record()
	r.stopRecording()
	if err == nil || errors.Is(err, errTimeout) {
		if opts.Evaluate != nil {
			rep.Expectations = opts.Evaluate(r.s, &rec)
		}
	}
	if notRun(err) {
		rep.Error = err.Error()
	}
	if opts.Keep != nil && r.env != nil && r.env.client != nil && ctx.Err() == nil {
		opts.Keep(ctx, rep.Expectations, r.env.kubeconfig)
	}
	rep.Cleanup = r.cleanup(ctx)
	if r.plan != nil {
		// After the cleanup, which clears faults with the config file.
		r.plan.removeFiles()
	}
	if r.env != nil || !rep.Cleanup.Done || len(rep.Cleanup.Removed) > 0 {
		// (Nothing started, nothing to clean up: nothing to show.)
		r.view.cleanup(rep.Cleanup)
	}
	rep.Finished = r.now()
	rep.DurationSeconds = rep.Finished.Sub(rep.Started).Seconds()
	rep.Steps = stepReports(rec)
	code := verdict(err, rep.Expectations)
	rep.Passed = code == tdrill.ExitPassed
	o := Outcome{Report: rep, Record: rec, Code: code}
	if notRun(err) {
		o.Err = err
	}
	return o
}

// verdict is the exit status of a drill that ended with err and results.
func verdict(err error, results []tdrill.Result) int {
	var bad *BadFileError
	var badConfig *ConfigFileError
	switch {
	case errors.As(err, &bad), errors.As(err, &badConfig):
		return tdrill.ExitBadFile
	case notRun(err):
		return tdrill.ExitNotRun
	}
	for _, res := range results {
		if !res.Passed {
			return tdrill.ExitBreached
		}
	}
	return tdrill.ExitPassed
}

func newRunner(opts Options) *runner {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &runner{opts: opts, s: withDefaults(opts.Scenario), now: now, log: log, view: newView(opts.Out, now)}
}

// run sets the drill up, runs its timeline and waits for its end.
func (r *runner) run(ctx context.Context, rep *tdrill.Report) error {
	p, err := prepare(r.s, r.opts)
	if err != nil {
		return err
	}
	r.plan = p // its files go after the cleanup, which needs the config
	if err := r.setUp(ctx, rep); err != nil {
		return err
	}
	r.mu.Lock()
	r.t0 = r.now()
	r.mu.Unlock()
	r.startLine(r.t0)
	tctx, cancel := context.WithDeadline(ctx, r.t0.Add(r.s.Timeout.Duration))
	defer cancel()
	err = r.timeline(tctx)
	timelineDone := err == nil
	if err == nil {
		err = r.settle(tctx)
	}
	if err != nil && ctx.Err() == nil && tctx.Err() != nil {
		r.view.line("the drill's timeout (%s) passed: expectations are judged on what was seen", r.s.Timeout.Duration)
		if !timelineDone {
			// Judged, but the drill did not run to its end.
			return fmt.Errorf("%w %w: %w", errTimeout, errUnfinished, err)
		}
		return errTimeout
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	return err
}

// setUp starts the environment, the virtual nodes and the coordinators,
// applies the workloads and waits until they are ready.
func (r *runner) setUp(ctx context.Context, rep *tdrill.Report) error {
	env, err := startEnvironment(ctx, r.s, r.opts, r.view)
	if env != nil {
		r.env = env
		rep.ControlPlaneStartSeconds = env.startSeconds
	}
	if err != nil {
		return err
	}
	if err := r.createNamespaces(ctx); err != nil {
		return err
	}
	if err := r.resolveNodes(ctx); err != nil {
		return err
	}
	if err := r.startVirtual(ctx); err != nil {
		return err
	}
	if err := r.startCoordinators(ctx); err != nil {
		return err
	}
	if err := r.startRecording(ctx); err != nil {
		return err
	}
	if err := r.applyWorkloads(ctx); err != nil {
		return err
	}
	return r.waitWorkloads(ctx)
}

// withDefaults is a copy of s with taints/drill's defaults filled in (the
// runner must not depend on the file having been read through them: tests
// build scenarios in Go).
func withDefaults(s *tdrill.Scenario) *tdrill.Scenario {
	c := *s
	c.Steps = make([]tdrill.Step, len(s.Steps))
	for i, st := range s.Steps {
		if st.Fault != nil {
			f := *st.Fault
			st.Fault = &f
		}
		if st.WaitFor != nil {
			w := *st.WaitFor
			st.WaitFor = &w
		}
		c.Steps[i] = st
	}
	c.Expect = make([]tdrill.Expectation, len(s.Expect))
	for i, e := range s.Expect {
		if e.Evicted != nil {
			x := *e.Evicted
			e.Evicted = &x
		}
		if e.Explain != nil {
			x := *e.Explain
			e.Explain = &x
		}
		c.Expect[i] = e
	}
	c.SetDefaults()
	return &c
}

// replicas is the number of coordinator processes to run.
func (s *plan) replicas() int {
	if len(s.scenario.Cluster.Pools) == 0 {
		return 0
	}
	if r := s.scenario.Cluster.Coordinator.Replicas; r != nil {
		return *r
	}
	return 1
}

// record is what the drill saw, its own parts filled in.
func (r *runner) record() tdrill.Record {
	var rec tdrill.Record
	if r.recording != nil {
		rec = r.recording.Record()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Namespace = DrillNamespace(r.s.Name)
	rec.Start = r.t0
	rec.End = r.now()
	rec.Steps = append([]tdrill.StepRecord(nil), r.steps...)
	rec.Predictions = append([]tdrill.Prediction(nil), r.preds...)
	return rec
}

// stepReports are the report's steps from the record's.
func stepReports(rec tdrill.Record) []tdrill.StepReport {
	out := make([]tdrill.StepReport, 0, len(rec.Steps))
	for _, s := range rec.Steps {
		sr := tdrill.StepReport{Name: s.Name, Kind: s.Kind, AtSeconds: s.Started.Sub(rec.Start).Seconds(), Nodes: s.Nodes, Error: s.Error}
		if !s.Ended.IsZero() {
			sr.DurationSeconds = s.Ended.Sub(s.Started).Seconds()
		}
		out = append(out, sr)
	}
	return out
}
