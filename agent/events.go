package agent

// Events probes report (probes.Result.Events): things that happened on the
// host, not states, such as node-problem-detector's temporary problems.
// The agent records each as a Warning Event on its Node and never turns one
// into a condition.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// probeEventRef is the reference the agent records probe events against:
// its Node, by kind and name, with the node name for UID, as the kubelet
// records its Node events (kubectl describe node lists both kinds). It is
// not the reference of the agent's own Events (TaintAdded,
// ConditionChanged, ...), which carry the Node's real UID, so the two have
// separate buckets in the Event recorder's spam filter, which is keyed by
// source and object: a flood of probe events cannot silence the agent's
// own.
func probeEventRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
}

// recordProbeEvents records the events r carries as Warning Events on the
// agent's Node, reason and message as the probe gave them (the message cut
// to maxMessageLen), through the agent's recorder. Observe calls it for
// every result.
//
// Pacing is in two layers. The probe limits each reason (the custom probe:
// custom.EventBurst, then one per custom.EventEvery, per NPD file). The
// recorder's correlator then limits all probe events of this agent
// together, with client-go's defaults: its spam filter lets a burst of 25
// through, then one per 5 minutes, and drops the rest; its aggregator
// folds more than 10 events of one reason within 10 minutes into one, and
// an Event repeated with the same message becomes a count on one object.
// Nothing is recorded before Run has made the recorder.
func (a *Agent) recordProbeEvents(r probes.Result) {
	if len(r.Events) == 0 || a.recorder == nil {
		return
	}
	ref := probeEventRef(a.opts.NodeName)
	for _, e := range r.Events {
		a.recorder.Eventf(ref, corev1.EventTypeWarning, e.Reason, "%s", taints.Truncate(e.Message, maxMessageLen))
	}
}
