package probes

import (
	"errors"
	"testing"
)

func TestConfigError(t *testing.T) {
	if err := NewConfigError("memory", nil); err != nil {
		t.Errorf("NewConfigError with no fields = %v, want nil", err)
	}
	err := NewConfigError("disk", []FieldError{{"Paths[1]", `"x" is not an absolute path`}, {"FreeBelow", "threshold 101% must not be above 100%"}})
	if got, want := err.Error(), "disk probe config: Paths[1]: \"x\" is not an absolute path\nFreeBelow: threshold 101% must not be above 100%"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Fields) != 2 || ce.Fields[0].Field != "Paths[1]" {
		t.Errorf("errors.As(%v) = %+v, want the two field errors", err, ce)
	}
}
