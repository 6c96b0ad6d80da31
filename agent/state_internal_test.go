package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// panicky is a Stateful probe whose every method panics.
type panicky struct{}

func (panicky) Name() string                              { return "panicky" }
func (panicky) Probe(context.Context) probes.Result       { panic("probe") }
func (panicky) State() []byte                             { panic("state") }
func (panicky) Restore([]byte) error                      { panic("restore") }
func (panicky) Clear([]string, time.Time) (string, error) { panic("clear") }

// TestStatefulCallsRecoverPanics checks a panicking Stateful method becomes
// an error naming the method, not a crash of the agent.
func TestStatefulCallsRecoverPanics(t *testing.T) {
	p := panicky{}
	_, stateErr := callState(p)
	_, clearErr := callClear(p, []string{"all"}, time.Now())
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"Restore", callRestore(p, []byte("x")), "Restore panicked: restore"},
		{"State", stateErr, "State panicked: state"},
		{"Clear", clearErr, "Clear panicked: clear"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, tt.err, tt.want)
		}
	}
}
