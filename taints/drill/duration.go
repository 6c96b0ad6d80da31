package drill

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// UnmarshalJSON reads a duration string ("90s", "2m30s"). Anything else
// is kept as written for Validate to report by its field path.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		*d = Duration{bad: string(b)}
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		*d = Duration{bad: s}
		return nil
	}
	*d = Duration{Duration: v}
	return nil
}

// MarshalJSON writes the duration as Go writes one, shortened ("2m", not
// "2m0s").
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.bad != "" {
		return nil, fmt.Errorf("duration %q: %s", d.bad, durationHint)
	}
	return json.Marshal(shortDuration(d.Duration))
}

// IsZero is true for an unset (or zero) duration; it makes omitzero skip it.
func (d Duration) IsZero() bool { return d.Duration == 0 && d.bad == "" }

const durationHint = `must be a duration such as "30s", "2m" or "1m30s"`

// check says what is wrong with d: not a duration, negative, or (unless
// zero is allowed) zero.
func (d Duration) check(allowZero bool) string {
	switch {
	case d.bad != "":
		return fmt.Sprintf("%q %s", d.bad, durationHint)
	case d.Duration < 0:
		return fmt.Sprintf("%s must not be negative", d.Duration)
	case d.Duration == 0 && !allowZero:
		return "must be greater than zero"
	}
	return ""
}

// shortDuration writes d as time.Duration does, without zero trailing
// units: 2m, 1h30m, 1m30s, 1.5s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
