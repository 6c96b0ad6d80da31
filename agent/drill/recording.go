package drill

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/utils/clock"

	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// recording is the recorder's side the runner uses: what it saw so far.
type recording interface {
	Record() tdrill.Record
	Stop()
}

// startRecording starts the recorder on the drill's namespaces (its own
// and those its workloads name) and nodes, its change lines going to the
// live view.
func (r *runner) startRecording(ctx context.Context) error {
	namespaces := []string{DrillNamespace(r.s.Name)}
	for _, o := range r.plan.objects {
		if ns := o.GetNamespace(); ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	own := map[string]bool{}
	for _, n := range r.drillNodes() {
		own[n] = true
	}
	scope := Scope{Namespaces: namespaces, Nodes: func(name string) bool { return own[name] }}
	if r.plan.replicas() > 0 || watchesGuard(r.s) {
		// The disruption guard of the drill's coordinators (or, on an
		// existing cluster, of its coordinator, as the config names it).
		scope.CoordinatorNamespace = r.coordinatorNamespace()
		scope.GuardName = r.plan.cfg.Coordinator.Guard.Name
	}
	rec, err := StartRecorder(ctx, r.env.client, scope, clock.RealClock{}, func(c Change) { r.view.lineAt(c.Time, c.Line) })
	if err != nil {
		return fmt.Errorf("starting to watch the drill's objects: %w", err)
	}
	r.recording = rec
	return nil
}

// stopRecording stops the recorder, once.
func (r *runner) stopRecording() {
	if r.recording != nil {
		r.recording.Stop()
	}
}

// watchesGuard: an expectation of s judges the disruption guard.
func watchesGuard(s *tdrill.Scenario) bool {
	return slices.ContainsFunc(s.Expect, func(e tdrill.Expectation) bool { return e.Guard != nil })
}
