// Package probes defines how selftaint looks at the machine it runs on: the
// Probe interface every health check implements, the Result it reports, and
// the Runner that schedules probes with intervals, timeouts, start jitter and
// panic recovery. Probes see only the host (through configurable roots) and
// never import Kubernetes packages; turning a Result into a NodeCondition is
// the agent's job.
package probes

import (
	"context"
	"time"
)

// Status is a probe's verdict about one aspect of the host.
type Status string

const (
	// StatusOK means the probe read its source and found it healthy.
	StatusOK Status = "OK"
	// StatusProblem means the probe read its source and found a problem.
	StatusProblem Status = "Problem"
	// StatusUnknown means the probe could not tell: its source was missing,
	// unreadable or garbage, it timed out or it panicked. The Result's
	// Message says why. Unknown is never reported as healthy.
	StatusUnknown Status = "Unknown"
)

// Reading is one measured value, kept for humans (selftaint check) and logs.
type Reading struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Result is what one run of a probe found.
type Result struct {
	// Probe is the name of the probe that produced this result.
	Probe string `json:"probe"`
	// Status is the verdict.
	Status Status `json:"status"`
	// Reason is a short CamelCase token for machines (e.g. "LowMemory",
	// "ReadError"); it becomes the NodeCondition's reason.
	Reason string `json:"reason"`
	// Message says what was seen in words, naming the threshold crossed or
	// the error met.
	Message string `json:"message"`
	// Readings are the values measured, in a stable order.
	Readings []Reading `json:"readings,omitempty"`
	// Time is when the probe finished.
	Time time.Time `json:"time"`
	// Duration is how long the probe ran.
	Duration time.Duration `json:"duration"`
	// Events are things the probe saw happen that are not a state of the
	// host, such as node-problem-detector's temporary problems: the agent
	// records each as a Warning Event on its Node, reason and message as
	// given, and never turns one into a condition. A probe reports an
	// event once, in the result of the run that saw it, and limits how
	// often it repeats one; the agent's Event recorder drops what still
	// comes too often (see the agent package).
	Events []Event `json:"events,omitempty"`
}

// Event is one thing a probe saw happen.
type Event struct {
	// Reason is a short CamelCase token for machines, e.g. NPD's
	// "ConntrackFull"; it becomes the Event's reason.
	Reason string `json:"reason"`
	// Message says what happened in words.
	Message string `json:"message"`
	// HeldBack is how many more Events of this reason the probe found
	// after this one and did not keep, as the agent's pacing would not
	// record them (a probe keeps a burst of each reason between runs, so
	// a flood costs no memory): the agent counts them as held back.
	HeldBack int `json:"heldBack,omitempty"`
}

// Probe checks one aspect of the host. Implementations must honour ctx
// cancellation where they block, and report failures to read their source as
// StatusUnknown with the error in Message rather than returning OK.
type Probe interface {
	// Name is the probe's stable identifier ("memory", "disk", "pid").
	Name() string
	// Probe runs the check once. Probe, Time and Duration are filled in by
	// the Runner; a probe may leave them empty.
	Probe(ctx context.Context) Result
}

// Stateful is a Probe whose findings must outlive the agent's process: a
// GPU that raised an Xid needing a reset has failed until the reset is
// seen, whether or not selftaint restarted in between. The agent keeps the
// probe's state on its Node (an annotation it owns, see the agent package)
// and hands it back with Restore before the probe's first run; until then
// the probe does not run. The agent also relays an operator's request to
// clear what the probe holds.
type Stateful interface {
	Probe
	// State returns what the probe needs after a restart, in its own
	// stable encoding; nil when it holds nothing. It must be cheap: the
	// agent asks after every run and writes the value when it changed.
	State() []byte
	// Restore takes back what State returned before a restart (nil when
	// nothing was kept). It is called once, before the first run. An
	// error means the state could not be used; the probe then starts
	// afresh and the error says what was wrong.
	Restore(state []byte) error
	// Clear drops what the probe holds for the targets an operator named
	// (their meaning is the probe's, e.g. GPU UUIDs; "all" for every
	// one) that it learned before requested. It returns what it cleared,
	// in words, or an error naming a target it does not know.
	Clear(targets []string, requested time.Time) (string, error)
}
