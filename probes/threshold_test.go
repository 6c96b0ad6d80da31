package probes

import (
	"math"
	"strings"
	"testing"
)

func TestParseThreshold(t *testing.T) {
	tests := []struct {
		in   string
		want Threshold
	}{
		{"5%", Threshold{Value: 5, Percent: true}},
		{"12.5%", Threshold{Value: 12.5, Percent: true}},
		{"100%", Threshold{Value: 100, Percent: true}},
		{"0%", Threshold{Value: 0, Percent: true}},
		{" 7% ", Threshold{Value: 7, Percent: true}},
		{"1000", Threshold{Value: 1000}},
		{"0", Threshold{}},
		{"0.5", Threshold{Value: 0.5}},
		{".5", Threshold{Value: 0.5}},
		{"512Mi", Threshold{Value: 512 << 20}},
		{"1Gi", Threshold{Value: 1 << 30}},
		{"1.5Gi", Threshold{Value: 1.5 * (1 << 30)}},
		{"2Ki", Threshold{Value: 2048}},
		{"3Ti", Threshold{Value: 3 << 40}},
		{"1Pi", Threshold{Value: 1 << 50}},
		{"2G", Threshold{Value: 2e9}},
		{"10k", Threshold{Value: 10e3}},
		{"500M", Threshold{Value: 500e6}},
		{"4T", Threshold{Value: 4e12}},
		{"1P", Threshold{Value: 1e15}},
	}
	for _, tt := range tests {
		got, err := ParseThreshold(tt.in)
		if err != nil {
			t.Errorf("ParseThreshold(%q): unexpected error %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseThreshold(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseThresholdErrors(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"-5%", "negative"},
		{"-1Gi", "negative"},
		{"101%", "at most 100%"},
		{"100.5%", "at most 100%"},
		{"%", "not a number"},
		{"Gi", "not a number"},
		{"abc", "not a number"},
		{"5%%", "not a number"},
		{"1.2.3", "not a number"},
		{"1e3", "not a number"},
		{"0x10", "not a number"},
		{"inf", "not a number"},
		{"NaN%", "not a number"},
		{"+5", "not a number"},
		{"5 Gi", "not a number"},
		{"5K", "not a number"},
		{"5Gb", "not a number"},
		{"5GiB", "not a number"},
		{"1_000", "not a number"},
		{strings.Repeat("9", 400), "out of range"},
		{strings.Repeat("9", 300) + "Pi", "too large"},
	}
	for _, tt := range tests {
		got, err := ParseThreshold(tt.in)
		if err == nil {
			t.Errorf("ParseThreshold(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseThreshold(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
		}
		if !strings.Contains(err.Error(), "invalid threshold \""+tt.in+"\"") && len(tt.in) < 50 {
			t.Errorf("ParseThreshold(%q) error = %q, want it to name the input", tt.in, err)
		}
	}
}

// TestParseThresholdLeavesRangeToValidate: a large amount parses, and
// Validate (or ValidateCount, with the count's own range) rejects it.
func TestParseThresholdLeavesRangeToValidate(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"18446744073709551616", "threshold 18446744073709551616 is too large: an amount must be below 16384Pi (2^64)"},
		{"16384Pi", "threshold 18446744073709551616 is too large"},
		{"99999999999999999999999Pi", "threshold 1.125899906842624e+38 is too large"},
		{"99999999999999999999999", "threshold 1e+23 is too large"},
	}
	for _, tt := range tests {
		th, err := ParseThreshold(tt.in)
		if err != nil {
			t.Errorf("ParseThreshold(%q): %v, want it parsed", tt.in, err)
			continue
		}
		if err := th.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseThreshold(%q).Validate() = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestThresholdString(t *testing.T) {
	tests := []struct {
		in   Threshold
		want string
	}{
		{Threshold{Value: 5, Percent: true}, "5%"},
		{Threshold{Value: 12.5, Percent: true}, "12.5%"},
		{Threshold{Value: 1000}, "1k"},
		{Threshold{Value: 1234}, "1234"},
		{Threshold{Value: 0.5}, "0.5"},
		{Threshold{}, "0"},
		{Threshold{Value: 512 << 20}, "512Mi"},
		{Threshold{Value: 1 << 30}, "1Gi"},
		{Threshold{Value: 1.5 * (1 << 30)}, "1536Mi"},
		{Threshold{Value: 2e9}, "2G"},
		{Threshold{Value: 2048}, "2Ki"},
		{Threshold{Value: 1 << 50}, "1Pi"},
	}
	for _, tt := range tests {
		got := tt.in.String()
		if got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.in, got, tt.want)
		}
		back, err := ParseThreshold(got)
		if err != nil || back != tt.in {
			t.Errorf("ParseThreshold(%q) = %+v, %v, want %+v (round trip)", got, back, err, tt.in)
		}
	}
}

func TestThresholdOf(t *testing.T) {
	tests := []struct {
		th    Threshold
		total float64
		want  float64
	}{
		{Threshold{Value: 5, Percent: true}, 1000, 50},
		{Threshold{Value: 12.5, Percent: true}, 80, 10},
		{Threshold{Value: 100, Percent: true}, 7, 7},
		{Threshold{Value: 5, Percent: true}, 0, 0},
		{Threshold{Value: 512}, 1000, 512},
		{Threshold{Value: 512}, 0, 512},
		{Threshold{}, 1000, 0},
	}
	for _, tt := range tests {
		if got := tt.th.Of(tt.total); got != tt.want {
			t.Errorf("%v.Of(%v) = %v, want %v", tt.th, tt.total, got, tt.want)
		}
	}
}

func TestThresholdIsZeroAndValidate(t *testing.T) {
	tests := []struct {
		th       Threshold
		wantZero bool
		wantErr  string
	}{
		{Threshold{}, true, ""},
		{Threshold{Percent: true}, true, ""},
		{Threshold{Value: 5, Percent: true}, false, ""},
		{Threshold{Value: 1}, false, ""},
		{Threshold{Value: -1}, false, "negative"},
		{Threshold{Value: 101, Percent: true}, false, "above 100%"},
		{Threshold{Value: math.NaN()}, false, "finite"},
		{Threshold{Value: math.Inf(1)}, false, "finite"},
		{Threshold{Value: 1 << 63}, false, ""},
		{Threshold{Value: 1 << 64}, false, "threshold 18446744073709551616 is too large: an amount must be below 16384Pi (2^64)"},
	}
	for _, tt := range tests {
		if got := tt.th.IsZero(); got != tt.wantZero {
			t.Errorf("%+v.IsZero() = %v, want %v", tt.th, got, tt.wantZero)
		}
		err := tt.th.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v.Validate() = %v, want nil", tt.th, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.Validate() = %v, want error containing %q", tt.th, err, tt.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{512, "512 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{1536, "1.5 KiB"},
		{412 << 20, "412 MiB"},
		{1.5 * (1 << 30), "1.5 GiB"},
		{15.6 * (1 << 30), "15.6 GiB"},
		{1023.96 * (1 << 10), "1 MiB"},
		{1 << 40, "1 TiB"},
		{1 << 50, "1 PiB"},
		{1 << 60, "1 EiB"},
		{4096 * (1 << 60), "4096 EiB"},
		{-1536, "-1.5 KiB"},
		{math.Inf(1), "+Inf B"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.in); got != tt.want {
			t.Errorf("FormatBytes(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatThreshold(t *testing.T) {
	tests := []struct {
		in   Threshold
		want string
	}{
		{Threshold{Value: 5, Percent: true}, "5%"},
		{Threshold{Value: 512 << 20}, "512 MiB"},
	}
	for _, tt := range tests {
		if got := FormatThreshold(tt.in); got != tt.want {
			t.Errorf("FormatThreshold(%+v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestThresholdValidateCount(t *testing.T) {
	tests := []struct {
		th      Threshold
		max     uint64
		why     string
		wantErr string // empty: valid
	}{
		{Threshold{}, 100, "", ""},
		{Threshold{Value: 100}, 100, "", ""},
		{Threshold{Value: 90, Percent: true}, 10, "", ""},
		{Threshold{Value: 4 << 20}, 4 << 20, "", ""},
		{Threshold{Value: 101}, 100, "", "threshold 101 is out of range: a count must be a whole number from 0 to 100"},
		{Threshold{Value: 1.5}, 100, "", "threshold 1.5 is out of range: a count must be a whole number from 0 to 100"},
		{Threshold{Value: 1 << 64}, 4 << 20, "the largest pid_max", "threshold 18446744073709551616 is out of range: a count must be a whole number from 0 to 4194304 (the largest pid_max)"},
		{Threshold{Value: 1 << 64}, math.MaxUint64, "", "from 0 to 18446744073709551615"},
		{Threshold{Value: 1 << 63}, math.MaxUint64, "", ""},
		{Threshold{Value: -1}, 100, "", "must not be negative"},
		{Threshold{Value: 120, Percent: true}, 100, "", "must not be above 100%"},
		{Threshold{Value: math.NaN()}, 100, "", "finite"},
	}
	for _, tt := range tests {
		err := tt.th.ValidateCount(tt.max, tt.why)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v.ValidateCount(%d) = %v, want nil", tt.th, tt.max, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.ValidateCount(%d) = %v, want error containing %q", tt.th, tt.max, err, tt.wantErr)
		}
	}
}
