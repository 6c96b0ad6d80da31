package probes

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Threshold is a limit a probe compares a measured value against: either an
// absolute amount (bytes, or a count such as PIDs) or a percentage of some
// total (memory, filesystem size, the PID limit). The zero Threshold (and any
// Threshold whose Value is 0) disables the check it configures.
type Threshold struct {
	// Value is the amount, or the percentage (0-100) when Percent is set.
	Value float64
	// Percent says Value is a percentage of a total rather than an amount.
	Percent bool
}

// Of returns the threshold as an amount, given the total it is a percentage
// of. For an absolute threshold total is ignored.
func (t Threshold) Of(total float64) float64 {
	if t.Percent {
		return total * t.Value / 100
	}
	return t.Value
}

// IsZero reports whether the threshold is disabled.
func (t Threshold) IsZero() bool {
	return t.Value == 0
}

// maxAmount bounds absolute thresholds: every byte count and count the
// kernel reports is 64-bit, so an amount of 2^64 or more could never be
// reached (nor compared exactly).
const maxAmount float64 = 1 << 64

// errTooLarge says an amount is not below maxAmount.
var errTooLarge = errors.New("too large: an amount must be below 16384Pi (2^64)")

// Validate reports whether t is in range: Value is finite and not
// negative, a percentage is at most 100, and an amount is below 2^64.
// ParseThreshold checks the syntax (and what no range could hold); the
// range is Validate's, or ValidateCount's, so that a count gets its own.
func (t Threshold) Validate() error {
	switch {
	case math.IsNaN(t.Value) || math.IsInf(t.Value, 0):
		return fmt.Errorf("threshold %v is not a finite number", t.Value)
	case t.Value < 0:
		return fmt.Errorf("threshold %s must not be negative", t)
	case t.Percent && t.Value > 100:
		return fmt.Errorf("threshold %s must not be above 100%%", t)
	case !t.Percent && t.Value >= maxAmount:
		return fmt.Errorf("threshold %s is %w", t, errTooLarge)
	}
	return nil
}

// ValidateCount is Validate for a threshold on a count of things (threads,
// inodes): an absolute one must also be a whole number from 0 to max. why,
// when not empty, says where max comes from.
func (t Threshold) ValidateCount(max uint64, why string) error {
	switch {
	case t.Percent || math.IsNaN(t.Value) || math.IsInf(t.Value, 0) || t.Value < 0:
		return t.Validate()
	// float64(max)+1 rounds to 2^64 for the largest max: a count is then
	// below 2^64, as it must be.
	case t.Value != math.Trunc(t.Value) || t.Value >= float64(max)+1:
		if why != "" {
			why = " (" + why + ")"
		}
		return fmt.Errorf("threshold %s is out of range: a count must be a whole number from 0 to %d%s", t, max, why)
	}
	return nil
}

// String formats t so that ParseThreshold reads it back: "5%", "12.5%",
// "512Mi", "2G", "1234" style, using the largest suffix that divides the
// value exactly. An amount beyond any range (2^64) reads "1e+23".
func (t Threshold) String() string {
	if t.Percent {
		return strconv.FormatFloat(t.Value, 'f', -1, 64) + "%"
	}
	v, best := t.Value, quantitySuffix{mult: 1}
	if v != 0 && v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		for _, u := range quantitySuffixes() {
			if u.mult > best.mult && math.Mod(v, u.mult) == 0 {
				best = u
			}
		}
	}
	switch {
	case best.mult == 1 && v == math.Trunc(v) && math.Abs(v) <= maxAmount:
		// A whole number in full, not its shortest form: 2^64 reads
		// 18446744073709551616, as written, not 18446744073709552000.
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) > maxAmount:
		// Out of any range: "1e+23", not 23 digits no one wrote.
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v/best.mult, 'f', -1, 64) + best.suffix
}

type quantitySuffix struct {
	suffix string
	mult   float64
}

// quantitySuffixes lists the Kubernetes-style suffixes ParseThreshold
// accepts, largest first, binary before decimal. It is a function so that no
// package-level table can be modified.
func quantitySuffixes() []quantitySuffix {
	return []quantitySuffix{
		{"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10},
		{"P", 1e15}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3},
	}
}

// ParseThreshold parses a threshold as written in flags and config files:
//
//	"5%", "12.5%"            a percentage of a total, 0-100
//	"1000", "0.5"            an absolute amount
//	"512Mi", "1Gi", "2Ki"    binary multiples (Ki Mi Gi Ti Pi)
//	"2G", "500M", "10k"      decimal multiples (k M G T P)
//
// The number is plain decimal (digits with an optional fraction); signs,
// exponents, spaces inside and unknown suffixes are errors. "0" and "0%"
// parse to a disabled threshold.
func ParseThreshold(s string) (Threshold, error) {
	t, err := parseThreshold(strings.TrimSpace(s))
	if err != nil {
		return Threshold{}, fmt.Errorf("invalid threshold %q: %w", s, err)
	}
	return t, nil
}

func parseThreshold(s string) (Threshold, error) {
	if s == "" {
		return Threshold{}, errors.New("empty")
	}
	if strings.HasPrefix(s, "-") {
		return Threshold{}, errors.New("must not be negative")
	}
	if num, ok := strings.CutSuffix(s, "%"); ok {
		v, err := parseDecimal(num)
		if err != nil {
			return Threshold{}, err
		}
		if v > 100 {
			return Threshold{}, errors.New("a percentage must be at most 100%")
		}
		return Threshold{Value: v, Percent: true}, nil
	}
	num, mult := s, 1.0
	for _, u := range quantitySuffixes() {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := parseDecimal(num)
	if err != nil {
		return Threshold{}, err
	}
	v *= mult
	if math.IsInf(v, 0) {
		return Threshold{}, errTooLarge
	}
	return Threshold{Value: v}, nil
}

// parseDecimal parses digits with an optional fraction ("12", "12.5", ".5",
// "5."), rejecting everything else strconv.ParseFloat would accept (signs,
// exponents, hex, "inf", "nan", underscores).
func parseDecimal(s string) (float64, error) {
	digits, dots := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			dots++
		default:
			return 0, fmt.Errorf("%q is not a number with an optional %% or suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T, P", s)
		}
	}
	if digits == 0 || dots > 1 {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return v, nil
}

// FormatBytes formats a byte count for humans with binary units and at most
// one decimal: "512 B", "1.5 GiB", "412 MiB".
func FormatBytes(b float64) string {
	if math.IsNaN(b) || math.IsInf(b, 0) {
		return fmt.Sprintf("%v B", b)
	}
	sign := ""
	if b < 0 {
		sign, b = "-", -b
	}
	units := [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for i < len(units)-1 && b >= 1024 {
		b /= 1024
		i++
	}
	// Rounding to one decimal may carry into the next unit: 1023.96 KiB
	// reads better as 1 MiB than as 1024 KiB.
	if i < len(units)-1 && math.Round(b*10)/10 >= 1024 {
		b /= 1024
		i++
	}
	s := strconv.FormatFloat(b, 'f', 1, 64)
	if i == 0 {
		s = strconv.FormatFloat(b, 'f', 0, 64)
	}
	s = strings.TrimSuffix(s, ".0")
	return sign + s + " " + units[i]
}

// FormatThreshold formats t for a message about bytes: a percentage as
// "5%", an amount as FormatBytes does ("512 MiB").
func FormatThreshold(t Threshold) string {
	if t.Percent {
		return t.String()
	}
	return FormatBytes(t.Value)
}
