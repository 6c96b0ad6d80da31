package probes

import (
	"fmt"
	"strings"
)

// FieldError is one problem with one field of a probe's Config.
type FieldError struct {
	// Field is the Go field path in the probe's Config: "FreeBelow",
	// "Paths[1]", "Targets[0].Address". A caller whose own settings use
	// the same Go field names (the agent's config does) can map it to
	// where the value came from.
	Field string
	// Detail says what is wrong, the offending value included.
	Detail string
}

// Error returns "Field: Detail".
func (e FieldError) Error() string { return e.Field + ": " + e.Detail }

// ConfigError is every problem a probe's Config.Validate found, one per
// field, so that a caller can report each against its own field path.
type ConfigError struct {
	// Probe is the probe's name ("memory").
	Probe string
	// Fields are the problems, in the order found.
	Fields []FieldError
}

// Error returns "<probe> probe config: " and the problems, one a line.
func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		lines[i] = f.Error()
	}
	return fmt.Sprintf("%s probe config: %s", e.Probe, strings.Join(lines, "\n"))
}

// NewConfigError returns a *ConfigError of probe with fields, or nil when
// there are none, for a Config.Validate to return.
func NewConfigError(probe string, fields []FieldError) error {
	if len(fields) == 0 {
		return nil
	}
	return &ConfigError{Probe: probe, Fields: fields}
}
