package agent

// Fault injection: an operator writes a fault annotation on the Node and the
// agent publishes the target condition in the fault's state, bypassing
// damping, until the fault expires; then it removes the annotation itself.
// Who may inject faults is decided by RBAC on nodes patch and recorded in the
// API server's audit log; there is no endpoint of our own. The annotation
// format with its parsing and validation is package taints/faults, shared
// with the selftaint fault command; this file holds the agent's bookkeeping
// of the faults it sees, applies and removes.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/faults"
)

// DefaultFaultMaxDuration is the longest a fault may last when the options
// do not say.
const DefaultFaultMaxDuration = time.Hour

// jsonPointerEscape escapes one JSON pointer segment (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// faultRemovalPatch is a JSON patch that removes annotation key only if it
// still holds value: a fault re-injected meanwhile is not deleted, and no
// other annotation is touched.
func faultRemovalPatch(key, value string) ([]byte, error) {
	path := "/metadata/annotations/" + jsonPointerEscape(key)
	return json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
}

// faultEval is what one sync makes of the fault annotations.
type faultEval = faults.Eval

// evalFaultsLocked judges the fault annotations on the Node
// (faults.Evaluate), remembering the verdicts for the next sync. a.mu is
// held.
func (a *Agent) evalFaultsLocked(annotations map[string]string, now time.Time) faultEval {
	ev, mem := faults.Evaluate(annotations, a.faultMem, now, a.faultJudge())
	a.faultMem = mem
	return ev
}

// faultJudge judges fault values as this agent's options say.
func (a *Agent) faultJudge() faults.Judge {
	return faults.Judge{
		Disabled:        a.opts.Faults.Disabled,
		Conditions:      a.faultConds,
		ProbeConditions: a.faultProbes,
		MaxDuration:     a.opts.Faults.MaxDuration,
	}
}

// adoptFaultsLocked recognises, at start-up, the faults a previous run was
// applying: their condition on the Node shows exactly their status, reason
// and message. It returns their conditions, which show a fault, not the
// probe. It also notes when each fault annotation was written (the Node's
// managed fields), so that faults are judged from then, not from this
// run's first sight: a fault rejected for lasting too long stays rejected
// across restarts. A fault being applied is re-judged the same way; it
// counts as seen valid unless it lasts too long, so one that expired while
// the agent was down is removed rather than rejected.
func (a *Agent) adoptFaultsLocked(node *corev1.Node) map[corev1.NodeConditionType]bool {
	faulted := map[corev1.NodeConditionType]bool{}
	if a.opts.Faults.Disabled {
		return faulted
	}
	a.faultMem.Written = faults.WrittenAt(node)
	now := a.clock.Now()
	for _, k := range faults.Keys(node.Annotations) {
		v := node.Annotations[k]
		f, err := faults.Parse(k, v, a.faultConds, a.faultProbes)
		if err != nil || !showsFault(node, f) {
			continue
		}
		faulted[f.Condition] = true
		if problem, expired := faults.CheckTime(f, a.faultMem.WrittenTime(k, v), now, a.opts.Faults.MaxDuration); problem != "" && !expired {
			// Evaluate rejects it, with an Event; the probe decides.
			a.log.Warn("not adopting the fault on the node", "annotation", k, "condition", f.Condition, "problem", problem)
			continue
		}
		a.faultMem.Seen[k] = faults.Verdict{Value: v, Fault: f}
		a.faultMem.Applied[k] = v
		a.log.Info("adopted fault from node", "annotation", k, "condition", f.Condition, "status", f.Status, "expiresAt", f.ExpiresAt)
	}
	return faulted
}

// showsFault reports whether f's condition on node shows exactly its
// status, reason and message (marked, or not as an older agent wrote it).
func showsFault(node *corev1.Node, f faults.Fault) bool {
	c := taints.FindCondition(node, f.Condition)
	if c == nil || c.Status != f.Status || c.Reason != f.Reason {
		return false
	}
	return c.Message == taints.Truncate(f.ConditionMessage(), maxMessageLen) || c.Message == taints.Truncate(f.Message, maxMessageLen)
}

// reportFaults logs and records Events for rejected faults and faults that
// started applying.
func (a *Agent) reportFaults(node *corev1.Node, ev faultEval) {
	for _, r := range ev.Rejected {
		a.recorder.Eventf(node, corev1.EventTypeWarning, "FaultRejected", "ignoring fault annotation %s: %s", r.Key, taints.Truncate(r.Problem, 512))
		a.log.Warn("ignoring fault annotation", "annotation", r.Key, "problem", r.Problem, "value", taints.Truncate(r.Value, 256))
	}
	for _, f := range ev.Started {
		etype := corev1.EventTypeNormal
		if f.Status != corev1.ConditionFalse {
			etype = corev1.EventTypeWarning
		}
		by := ""
		if f.InjectedBy != "" {
			by = ", injected by " + f.InjectedBy
		}
		a.recorder.Eventf(node, etype, "FaultActive", "fault %s applies until %s%s: %s is %s (%s): %s",
			f.Key, f.ExpiresAt.UTC().Format(time.RFC3339), by, f.Condition, f.Status, f.Reason, taints.Truncate(f.Message, 256))
		a.log.Info("fault applies", "annotation", f.Key, "condition", f.Condition, "status", f.Status, "reason", f.Reason,
			"expiresAt", f.ExpiresAt, "injectedBy", f.InjectedBy)
	}
	for _, k := range ev.Ended {
		a.log.Info("fault no longer applies", "annotation", k)
	}
}

// removeExpiredFaults deletes the annotations of faults that expired after
// being applied, each with a JSON patch that first tests the exact value: a
// fault re-injected in the meantime fails the test (422) and is kept, and no
// other annotation is touched.
func (a *Agent) removeExpiredFaults(ctx context.Context, node *corev1.Node, expired []faults.Fault) error {
	for _, f := range expired {
		patch, err := faultRemovalPatch(f.Key, f.Value)
		if err != nil {
			return fmt.Errorf("building fault removal patch: %w", err)
		}
		written, err := a.opts.Client.Nodes().Patch(ctx, a.opts.NodeName, types.JSONPatchType, patch,
			metav1.PatchOptions{FieldManager: a.opts.FieldManager})
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// The annotation changed or went away since we read it; the
			// informer brings the new version and we judge that.
			a.log.Debug("fault annotation changed before its removal; re-reading", "annotation", f.Key, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("removing expired fault %s: %w", f.Key, err)
		}
		a.remember(written)
		a.recorder.Eventf(written, corev1.EventTypeNormal, "FaultExpired", "fault %s expired at %s; removed it, %s follows its probe again",
			f.Key, f.ExpiresAt.UTC().Format(time.RFC3339), f.Condition)
		a.log.Info("removed expired fault", "annotation", f.Key, "condition", f.Condition, "expiredAt", f.ExpiresAt)
	}
	return nil
}
