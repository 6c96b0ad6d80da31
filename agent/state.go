package agent

// Probes whose findings outlive the agent (probes.Stateful): a GPU that
// raised an Xid needing a reset has failed until the reset is seen, whether
// or not the agent restarted in between. The agent keeps each such probe's
// state in an annotation it owns on its Node, selftaint.io/state-<probe>,
// written in the same compare-and-swap metadata patch as the taints; it
// hands the state back with Restore at its first sync, before the probe's
// first run (the runner's Start gate), so no result of the probe can reach
// the Node before its state is restored.
//
// An operator clears what a probe holds by writing
// selftaint.io/clear-<probe> (ClearRequest, `selftaint gpu clear` writes it
// for the GPU probe). The agent handles each value once: it calls the
// probe's Clear, says what came of it in an Event (ProbeStateCleared, or
// ClearRejected for a request it cannot act on), and removes the annotation
// in its next metadata patch, only while it still holds the value handled.
//
// A state annotation of a probe this agent does not run (not configured, or
// not stateful) is left alone: the probe may come back (a driver that did
// not load), and only a person knows it is gone for good.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/strict"
	"github.com/selftaint/selftaint/taints"
)

const (
	// StateAnnotationPrefix, followed by a probe's name, is the annotation
	// holding a Stateful probe's state. The agent owns it: do not edit it.
	StateAnnotationPrefix = "selftaint.io/state-"
	// ClearAnnotationPrefix, followed by a probe's name, is an operator's
	// request (a ClearRequest) to clear what the probe holds.
	ClearAnnotationPrefix = "selftaint.io/clear-"
	// ClearAll is the target that means every one the probe holds.
	ClearAll = "all"
	// MaxStateLen is the longest state the agent writes. A longer one is
	// not written (the Node keeps the last one) and is reported: annotations
	// share 256 KiB per object, and an oversized one would fail the whole
	// metadata patch, taints included.
	MaxStateLen = 32 << 10
)

// Reasons of the Events about probe state and clear requests, on the Node.
const (
	// ReasonProbeStateCleared: the probe cleared what was asked; the
	// message carries its words.
	ReasonProbeStateCleared = "ProbeStateCleared"
	// ReasonClearRejected: the request could not be acted on; the message
	// says why. The request is removed all the same.
	ReasonClearRejected = "ClearRejected"
	// ReasonProbeStateUnreadable: a probe could not restore the state kept
	// on the Node; it started afresh.
	ReasonProbeStateUnreadable = "ProbeStateUnreadable"
	// ReasonProbeStateUnwritable: a probe's state cannot be kept on the
	// Node (too long, not text); the last one written stays.
	ReasonProbeStateUnwritable = "ProbeStateUnwritable"
)

// StateAnnotation is the annotation holding probe's state.
func StateAnnotation(probe string) string { return StateAnnotationPrefix + probe }

// ClearAnnotation is the annotation asking to clear probe's state.
func ClearAnnotation(probe string) string { return ClearAnnotationPrefix + probe }

// ClearRequest is the value of a clear annotation, JSON:
// {"targets":["GPU-..."],"requestedAt":"2026-03-01T12:00:00Z","by":"alice"}.
type ClearRequest struct {
	// Targets are what to clear, in the probe's terms (GPU UUIDs for the
	// GPU probe); ["all"] clears everything the probe holds.
	Targets []string `json:"targets"`
	// RequestedAt (RFC 3339) bounds what is cleared: only what the probe
	// learned before it, so a failure seen after the request stands.
	RequestedAt string `json:"requestedAt"`
	// By is free text naming who asked, for the Event.
	By string `json:"by,omitempty"`
}

// Encode returns the request as the annotation's value, after checking it
// as the agent will.
func (r ClearRequest) Encode() (string, error) {
	if _, err := r.check(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encoding clear request: %w", err)
	}
	return string(b), nil
}

// ParseClearRequest decodes and checks a clear annotation's value: strict
// JSON, at least one target and none empty, requestedAt in RFC 3339. It
// returns the request and when it was made.
func ParseClearRequest(value string) (ClearRequest, time.Time, error) {
	var r ClearRequest
	if err := strict.JSON([]byte(value), &r); err != nil {
		return ClearRequest{}, time.Time{}, fmt.Errorf("not a valid clear request (want JSON {\"targets\":[...],\"requestedAt\":\"RFC 3339\",\"by\":\"...\"}): %w", err)
	}
	at, err := r.check()
	if err != nil {
		return ClearRequest{}, time.Time{}, err
	}
	return r, at, nil
}

// check validates r and returns when it was requested.
func (r ClearRequest) check() (time.Time, error) {
	if len(r.Targets) == 0 {
		return time.Time{}, errors.New(`the clear request names no targets (give ["all"] to clear everything)`)
	}
	if i := slices.Index(r.Targets, ""); i >= 0 {
		return time.Time{}, fmt.Errorf("the clear request's target %d is empty", i)
	}
	if r.RequestedAt == "" {
		return time.Time{}, errors.New("the clear request has no requestedAt")
	}
	at, err := time.Parse(time.RFC3339, r.RequestedAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("the clear request's requestedAt %q is not RFC 3339: %w", r.RequestedAt, err)
	}
	return at, nil
}

// statefulProbe is the agent's record of one Stateful probe.
type statefulProbe struct {
	probe probes.Stateful
	// start is the runner's Start gate of the probe: closed once its state
	// is restored. Set in New.
	start chan struct{}

	// The fields below are guarded by Agent.mu.

	// restored: Restore was called (at adoption). Until then the probe's
	// state is never written: it would overwrite the one kept.
	restored bool
	// synced is the state (State's bytes) the last successful sync left
	// the Node with, or the annotation adopted; a run that changes the
	// state away from it enqueues a sync.
	synced string
	// unwritable is why the state could not be written, as last reported.
	unwritable string
}

// statePass is what one sync does about the Stateful probes: the states it
// wants on the Node and the clear requests it handled.
type statePass struct {
	// wanted is each state annotation's value ("" for absent), for
	// taints.MetadataInput.Annotations; current each probe's raw state,
	// for statefulProbe.synced once the sync succeeds.
	wanted, current map[string]string
	// consumed are the clear annotations handled, key -> value, for
	// taints.MetadataInput.Consumed.
	consumed map[string]string
	// cleared are the requests first handled at this sync; unwritable the
	// states that cannot be written, newly so.
	cleared    []clearOutcome
	unwritable []unwritableState
}

// clearOutcome is what came of one clear request.
type clearOutcome struct {
	key, value, probe string
	req               ClearRequest
	words, reject     string // reject != "": the request was rejected, why
}

type unwritableState struct {
	probe, why string
	bytes      int
}

// addStateful records p if it is a Stateful probe and gates its first run
// on its restore. It returns the runner's entry.
func (a *Agent) addStateful(e probes.Entry) probes.Entry {
	sp, ok := e.Probe.(probes.Stateful)
	if !ok {
		return e
	}
	s := &statefulProbe{probe: sp, start: make(chan struct{})}
	a.stateful[sp.Name()] = s
	e.Start = s.start
	return e
}

// restoreLocked hands each Stateful probe the state its annotation on node
// holds (nil when there is none), then opens its Start gate. A probe that
// cannot use its state starts afresh; a Warning Event says so. a.mu is held.
func (a *Agent) restoreLocked(node *corev1.Node) {
	for _, name := range slices.Sorted(maps.Keys(a.stateful)) {
		s := a.stateful[name]
		key := StateAnnotation(name)
		value, kept := node.Annotations[key]
		var state []byte
		if kept {
			state = []byte(value)
		}
		err := callRestore(s.probe, state)
		s.restored, s.synced = true, value
		close(s.start)
		switch {
		case err != nil:
			a.recorder.Eventf(node, corev1.EventTypeWarning, ReasonProbeStateUnreadable,
				"probe %s could not restore its state from %s: %s; it starts afresh, and the annotation follows its new state",
				name, key, taints.Truncate(err.Error(), 512))
			a.log.Warn("probe state unreadable; the probe starts afresh", "probe", name, "annotation", key,
				"err", err, "value", taints.Truncate(value, 256))
		case kept:
			a.log.Info("restored probe state from node", "probe", name, "annotation", key, "bytes", len(value))
		}
	}
}

// statePassLocked handles the clear requests on node not handled before,
// then takes each restored probe's state: what this sync writes. It runs
// after adoption (restoreLocked). a.mu is held.
func (a *Agent) statePassLocked(node *corev1.Node) statePass {
	sp := statePass{wanted: map[string]string{}, current: map[string]string{}, consumed: map[string]string{}}
	a.clearsLocked(node, &sp)
	for _, name := range slices.Sorted(maps.Keys(a.stateful)) {
		s := a.stateful[name]
		if !s.restored {
			continue
		}
		raw, err := callState(s.probe)
		why := ""
		switch {
		case err != nil:
			why = err.Error()
		case !utf8.Valid(raw):
			why = "it is not UTF-8 text"
		case len(raw) > MaxStateLen:
			// No size in the words: a state that keeps growing is
			// reported once, not at every change.
			why = fmt.Sprintf("it is longer than the %d bytes an annotation of ours may take", MaxStateLen)
		}
		if err == nil {
			sp.current[name] = string(raw)
		}
		if why != "" {
			// Leave the annotation as it is: the last state written is
			// better than none.
			if why != s.unwritable {
				sp.unwritable = append(sp.unwritable, unwritableState{probe: name, why: why, bytes: len(raw)})
			}
			s.unwritable = why
			continue
		}
		s.unwritable = ""
		sp.wanted[StateAnnotation(name)] = string(raw)
	}
	return sp
}

// clearsLocked handles each clear annotation on node whose value it has not
// handled yet, and lists every one handled (now or before) that the Node
// still holds, for removal. a.mu is held.
func (a *Agent) clearsLocked(node *corev1.Node, sp *statePass) {
	for _, key := range slices.Sorted(maps.Keys(node.Annotations)) {
		if !strings.HasPrefix(key, ClearAnnotationPrefix) {
			continue
		}
		value := node.Annotations[key]
		sp.consumed[key] = value
		if seen, ok := a.clearSeen[key]; ok && seen == value {
			continue // handled; its removal did not go through yet
		}
		a.clearSeen[key] = value
		sp.cleared = append(sp.cleared, a.clearLocked(key, value))
	}
	// A value the Node no longer holds may be written again, as a new
	// request.
	for key, value := range a.clearSeen {
		if v, ok := node.Annotations[key]; !ok || v != value {
			delete(a.clearSeen, key)
		}
	}
}

// clearLocked acts on one clear request. a.mu is held.
func (a *Agent) clearLocked(key, value string) clearOutcome {
	name := strings.TrimPrefix(key, ClearAnnotationPrefix)
	out := clearOutcome{key: key, value: value, probe: name}
	req, at, err := ParseClearRequest(value)
	if err != nil {
		out.reject = err.Error()
		return out
	}
	out.req = req
	s, ok := a.stateful[name]
	switch {
	case !ok:
		known := "none does"
		if len(a.stateful) > 0 {
			known = "those that do: " + strings.Join(slices.Sorted(maps.Keys(a.stateful)), ", ")
		}
		out.reject = fmt.Sprintf("no probe %q keeps state on this node (%s)", name, known)
		return out
	case !s.restored:
		// Unreachable: adoption restores every probe first. Kept so a
		// clear can never be undone by a later Restore.
		out.reject = fmt.Sprintf("probe %s has not restored its state yet", name)
		return out
	}
	words, err := callClear(s.probe, req.Targets, at)
	if err != nil {
		out.reject = fmt.Sprintf("probe %s: %v", name, err)
		return out
	}
	out.words = words
	return out
}

// requested says who asked for c and when, as far as its request says.
func (c clearOutcome) requested() string {
	if c.req.RequestedAt == "" {
		return ""
	}
	by := ""
	if c.req.By != "" {
		by = " by " + c.req.By
	}
	return fmt.Sprintf(" (requested%s at %s)", by, c.req.RequestedAt)
}

// reportStatePass tells what a sync did about the probes' states: each
// clear request handled (an Event each) and states that cannot be written.
func (a *Agent) reportStatePass(node *corev1.Node, sp statePass) {
	for _, c := range sp.cleared {
		if c.reject != "" {
			a.recorder.Eventf(node, corev1.EventTypeWarning, ReasonClearRejected, "ignored and removed %s%s: %s", c.key, c.requested(), taints.Truncate(c.reject, 512))
			a.log.Warn("clear request rejected; removing it", "annotation", c.key, "problem", c.reject, "value", taints.Truncate(c.value, 256))
			continue
		}
		a.recorder.Eventf(node, corev1.EventTypeNormal, ReasonProbeStateCleared, "probe %s cleared its state as %s asked%s: %s",
			c.probe, c.key, c.requested(), taints.Truncate(c.words, 512))
		a.log.Info("probe state cleared on request", "probe", c.probe, "annotation", c.key, "by", c.req.By,
			"requestedAt", c.req.RequestedAt, "targets", c.req.Targets, "result", c.words)
		// Its next run reports what is left: now, not at its interval.
		a.runner.Wake(c.probe)
	}
	for _, u := range sp.unwritable {
		a.recorder.Eventf(node, corev1.EventTypeWarning, ReasonProbeStateUnwritable,
			"cannot keep the state of probe %s in %s: %s; the annotation keeps the last state written", u.probe, StateAnnotation(u.probe), u.why)
		a.log.Warn("probe state cannot be written", "probe", u.probe, "why", u.why, "bytes", u.bytes)
	}
}

// noteStatesSyncedLocked records the states a successful sync left on the
// Node. a.mu is held.
func (a *Agent) noteStatesSyncedLocked(current map[string]string) {
	for name, v := range current {
		a.stateful[name].synced = v
	}
}

// stateChangedLocked reports whether probe's state differs from what the
// last sync left on the Node. a.mu is held.
func (a *Agent) stateChangedLocked(probe string) bool {
	s, ok := a.stateful[probe]
	if !ok || !s.restored {
		return false
	}
	raw, err := callState(s.probe)
	return err == nil && string(raw) != s.synced
}

// callRestore, callState and callClear call a Stateful probe, turning a
// panic into an error: one broken probe must not take the agent down.
func callRestore(p probes.Stateful, state []byte) (err error) {
	defer recovered(&err, "Restore")
	return p.Restore(state)
}

func callState(p probes.Stateful) (b []byte, err error) {
	defer recovered(&err, "State")
	return p.State(), nil
}

func callClear(p probes.Stateful, targets []string, requested time.Time) (words string, err error) {
	defer recovered(&err, "Clear")
	return p.Clear(slices.Clone(targets), requested)
}

// recovered, deferred, turns a panic of the probe's method into *err.
func recovered(err *error, method string) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%s panicked: %v", method, v)
	}
}
