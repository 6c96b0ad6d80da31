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
