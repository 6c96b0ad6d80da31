package agent

// Events: those probes report (probes.Result.Events), things that happened
// on the host, not states, such as node-problem-detector's temporary
// problems, which the agent records as Warning Events on its Node and never
// turns into a condition; and the agent's own (ConditionChanged, NPD's
// reasons for the conditions of NPD files, TaintAdded, ...).
//
// Pacing happens here and only here (eventPacer): client-go's correlator is
// given options under which its spam filter never drops (neverDrop), and
// the probes report every Event they find. What the pacer holds back is
// counted (Metrics.EventsHeldBack, selftaint_events_held_back_total), as
// are those a probe counted instead of keeping (probes.Event.HeldBack), and
// told in the log once per burst: when a reason starts being held back,
// and, when one of its Events is let through again, how many were held
// back in between.

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
)

// The pacing rule. Each reason of the probes' Events may have a burst of
// ReasonBurst, then one per ReasonEvery: the pace client-go's Event
// recorder allows one source on one object, which node-problem-detector
// records each file's Events through, kept per reason, so one flapping
// temporary rule neither floods the Node's Events nor silences the other
// rules. On top of that the probes' Events together, and the agent's own
// Events together, may each have a burst of SourceBurst, then one per
// SourceEvery: client-go's spam filter's numbers, kept per class as that
// filter keyed them (by source and object, probeEventRef), so a flood of
// probe Events cannot silence the agent's own.
const (
	ReasonBurst = 5
	ReasonEvery = 5 * time.Minute
	SourceBurst = 25
	SourceEvery = 5 * time.Minute
)

// eventClass is who an Event is from: a probe, or the agent itself.
type eventClass uint8

const (
	classAgent eventClass = iota
	classProbe
)

func (c eventClass) String() string {
	if c == classProbe {
		return "probe"
	}
	return "agent"
}

// paceKey is what a reason's bucket and its held-back count are kept by.
type paceKey struct {
	class  eventClass
	reason string
}

// tokenBucket holds tokens up to burst, one added per every.
type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func (b *tokenBucket) refill(now time.Time, burst int, every time.Duration) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(burst), b.tokens+float64(d)/float64(every))
		b.at = now
	}
}

// heldBack is a reason being held back: since when, and how many.
type heldBack struct {
	since time.Time
	n     int
}

// paceVerdict is the pacer's decision on one Event.
type paceVerdict struct {
	// Record: the Event is recorded; otherwise it is held back (and
	// counted).
	Record bool
	// HoldStarted: the Event is the first of its reason held back since
	// one was last let through.
	HoldStarted bool
	// Released is how many Events of its reason were held back, since
	// HeldSince, before this one was let through again (0: none).
	Released  int
	HeldSince time.Time
}

// eventPacer decides which Events are recorded (the pacing rule above). It
// is pure: time comes in, no goroutines; not safe for concurrent use.
type eventPacer struct {
	reasons map[paceKey]*tokenBucket
	classes map[eventClass]*tokenBucket
	held    map[paceKey]heldBack
}

func newEventPacer() *eventPacer {
	return &eventPacer{reasons: map[paceKey]*tokenBucket{}, classes: map[eventClass]*tokenBucket{}, held: map[paceKey]heldBack{}}
}

// decide says whether an Event of class and reason at now is recorded, and
// takes its tokens if so.
func (p *eventPacer) decide(now time.Time, class eventClass, reason string) paceVerdict {
	key := paceKey{class, reason}
	cb := p.classes[class]
	if cb == nil {
		cb = &tokenBucket{tokens: SourceBurst, at: now}
		p.classes[class] = cb
	}
	cb.refill(now, SourceBurst, SourceEvery)
	rb := p.reasons[key]
	if class == classProbe {
		if rb == nil {
			rb = &tokenBucket{tokens: ReasonBurst, at: now}
			p.reasons[key] = rb
		}
		rb.refill(now, ReasonBurst, ReasonEvery)
	}
	if cb.tokens < 1 || (rb != nil && rb.tokens < 1) {
		return paceVerdict{HoldStarted: p.hold(now, key, 1)}
	}
	cb.tokens--
	if rb != nil {
		rb.tokens--
	}
	v := paceVerdict{Record: true}
	if h, ok := p.held[key]; ok {
		v.Released, v.HeldSince = h.n, h.since
		delete(p.held, key)
	}
	return v
}

// hold counts n Events of key held back at now, and reports whether they
// start a hold (none was held back since one was last let through).
func (p *eventPacer) hold(now time.Time, key paceKey, n int) (started bool) {
	h, holding := p.held[key]
	if !holding {
		h.since = now
	}
	h.n += n
	p.held[key] = h
	return !holding
}

// eventSink is where the agent's Events go: paced (eventPacer), then to
// client-go's recorder.
type eventSink struct {
	recorder record.EventRecorder
	now      func() time.Time
	metrics  Metrics
	log      *slog.Logger
	mu       sync.Mutex // guards pacer
	pacer    *eventPacer
}

// record records an Event of class on object unless the pacer holds it
// back; then it counts it, and logs the first of a burst. When an Event
// of a reason held back is let through again, it logs how many were held
// back.
func (s *eventSink) record(class eventClass, object runtime.Object, eventType, reason, message string) {
	now := s.now()
	s.mu.Lock()
	v := s.pacer.decide(now, class, reason)
	s.mu.Unlock()
	if v.Released > 0 {
		s.log.Info("Events let through again", "reason", reason, "from", class.String(), "heldBack", v.Released, "since", v.HeldSince)
	}
	if !v.Record {
		s.heldBack(class, reason, 1, v.HoldStarted)
		return
	}
	s.recorder.Event(object, eventType, reason, message)
}

// holdBack counts n Events of class and reason that were not recorded
// since the pacer would hold them back: a probe found them beyond the
// burst it keeps between runs (probes.Event.HeldBack).
func (s *eventSink) holdBack(class eventClass, reason string, n int) {
	if n <= 0 {
		return
	}
	now := s.now()
	s.mu.Lock()
	started := s.pacer.hold(now, paceKey{class, reason}, n)
	s.mu.Unlock()
	s.heldBack(class, reason, n, started)
}

// heldBack counts n Events held back, and logs the first of a burst.
func (s *eventSink) heldBack(class eventClass, reason string, n int, started bool) {
	s.metrics.EventsHeldBack(reason, n)
	if started {
		s.log.Warn("Events held back: too many of this reason; they are counted in selftaint_events_held_back_total, and their number is logged when one is let through again",
			"reason", reason, "from", class.String(), "pace", paceRule(class))
	}
}

// paceRule says the pacing rule of class, for the log.
func paceRule(c eventClass) string {
	all := fmt.Sprintf("%d, then one per %v, of all the %s's Events", SourceBurst, SourceEvery, c)
	if c == classProbe {
		return fmt.Sprintf("%d, then one per %v, of each reason; %s", ReasonBurst, ReasonEvery, all)
	}
	return all
}

// pacedRecorder is the record.EventRecorder the agent records its own
// Events through: each goes through the sink's pacing as the agent's.
type pacedRecorder struct{ sink *eventSink }

var _ record.EventRecorder = pacedRecorder{}

func (r pacedRecorder) Event(object runtime.Object, eventType, reason, message string) {
	r.sink.record(classAgent, object, eventType, reason, message)
}

func (r pacedRecorder) Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any) {
	r.sink.record(classAgent, object, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

func (r pacedRecorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventType, reason, messageFmt string, args ...any) {
	r.Eventf(object, eventType, reason, messageFmt, args...)
}

// neverDrop are correlator options under which client-go's spam filter
// lets every Event through (the pacing is eventPacer's); its aggregator
// and its count of repeats stay as client-go has them.
func neverDrop() record.CorrelatorOptions {
	return record.CorrelatorOptions{QPS: math.MaxFloat32, BurstSize: math.MaxInt32}
}

// probeEventRef is the reference the agent records probe events against:
// its Node, by kind and name, with the node name for UID, as the kubelet
// records its Node events (kubectl describe node lists both kinds). It is
// not the reference of the agent's own Events (TaintAdded,
// ConditionChanged, ...), which carry the Node's real UID.
func probeEventRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
}

// recordProbeEvents records the events r carries as Warning Events on the
// agent's Node, reason and message as the probe gave them (the message cut
// to maxMessageLen), paced as probe Events. Observe calls it for every
// result, as soon as the result comes; the Events a probe only counted
// (probes.Event.HeldBack) are counted as held back. Nothing is recorded
// before Run has made the recorder.
func (a *Agent) recordProbeEvents(r probes.Result) {
	if len(r.Events) == 0 || a.events == nil {
		return
	}
	ref := probeEventRef(a.opts.NodeName)
	for _, e := range r.Events {
		a.events.record(classProbe, ref, corev1.EventTypeWarning, e.Reason, taints.Truncate(e.Message, maxMessageLen))
		a.events.holdBack(classProbe, e.Reason, e.HeldBack)
	}
}
