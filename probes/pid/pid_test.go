package pid

import (
	"path/filepath"
	"testing"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

func pct(v float64) probes.Threshold { return probes.Threshold{Value: v, Percent: true} }

func TestProbeFixtures(t *testing.T) {
	def := Config{UsedAbove: pct(90)}
	tests := []struct {
		name         string
		root         string // under testdata/
		cfg          Config
		wantStatus   probes.Status
		wantReason   string
		wantMessage  []string
		wantReadings []probes.Reading // nil: not checked
	}{
		{
			name: "healthy", root: "healthy", cfg: def,
			wantStatus: probes.StatusOK, wantReason: ReasonPIDsAvailable,
			// No processes counted: /proc is walked only for a problem.
			wantMessage: []string{"threads 1234 (0.5% of threads-max 254610) is at or below 90%"},
			wantReadings: []probes.Reading{
				{Name: "threads", Value: "1234"},
				{Name: "pid_max", Value: "4194304"},
				{Name: "threads-max", Value: "254610"},
				{Name: "limit", Value: "254610 (threads-max)"},
				{Name: "used", Value: "0.5%"},
			},
		},
		{
			name: "healthy, check disabled", root: "healthy", cfg: Config{},
			wantStatus: probes.StatusOK, wantReason: ReasonPIDsAvailable,
			wantMessage: []string{"threads 1234 (0.5% of threads-max 254610)"},
		},
		{
			name: "healthy, absolute count crossed", root: "healthy", cfg: Config{UsedAbove: probes.Threshold{Value: 1000}},
			wantStatus: probes.StatusProblem, wantReason: ReasonPIDExhaustion,
			wantMessage: []string{"threads 1234 (0.5% of threads-max 254610, 3 processes) is above 1000"},
		},
		{
			name: "near pid_max", root: "pidmax-low", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonPIDExhaustion,
			wantMessage: []string{"threads 30000 (91.6% of pid_max 32768, 3 processes) is above 90%"},
			wantReadings: []probes.Reading{
				{Name: "threads", Value: "30000"},
				{Name: "pid_max", Value: "32768"},
				{Name: "threads-max", Value: "254610"},
				{Name: "limit", Value: "32768 (pid_max)"},
				{Name: "used", Value: "91.6%"},
				{Name: "processes", Value: "3"},
			},
		},
		{
			name: "near pid_max, higher threshold", root: "pidmax-low", cfg: Config{UsedAbove: pct(95)},
			wantStatus: probes.StatusOK, wantReason: ReasonPIDsAvailable,
			wantMessage: []string{"is at or below 95%"},
		},
		{
			name: "near threads-max", root: "threadsmax-low", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonPIDExhaustion,
			wantMessage: []string{"threads 11500 (95.8% of threads-max 12000, 3 processes) is above 90%"},
		},
		{
			name: "loadavg garbage", root: "loadavg-garbage", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"loadavg-garbage/proc/loadavg", "got 1 fields, want 5"},
		},
		{
			name: "loadavg empty", root: "loadavg-empty", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"loadavg-empty/proc/loadavg: file is empty"},
		},
		{
			name: "loadavg truncated", root: "loadavg-truncated", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"loadavg-truncated/proc/loadavg: got 4 fields"},
		},
		{
			name: "loadavg missing", root: "loadavg-missing", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"reading loadavg: open testdata/loadavg-missing/proc/loadavg: no such file or directory"},
		},
		{
			name: "pid_max missing", root: "pidmax-missing", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"pidmax-missing/proc/sys/kernel/pid_max: no such file or directory"},
		},
		{
			name: "pid_max garbage", root: "pidmax-garbage", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"parsing testdata/pidmax-garbage/proc/sys/kernel/pid_max", `"lots"`},
		},
		{
			name: "pid_max zero", root: "pidmax-zero", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"pid_max: limit is 0"},
		},
		{
			name: "threads-max empty", root: "threadsmax-empty", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"threads-max: file is empty"},
		},
		{
			name: "no host root", root: "does-not-exist", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"does-not-exist/proc/sys/kernel/pid_max"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := probestest.RunProbe(t, New, tt.cfg, probes.Host{Root: filepath.Join("testdata", tt.root)})
			probestest.CheckResult(t, got, probestest.Want{Status: tt.wantStatus, Reason: tt.wantReason, Message: tt.wantMessage, Readings: tt.wantReadings})
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero", Config{}, ""},
		{"percent", Config{UsedAbove: pct(90)}, ""},
		{"count", Config{UsedAbove: probes.Threshold{Value: 30000}}, ""},
		{"percent above 100", Config{UsedAbove: pct(120)}, "UsedAbove: threshold 120% must not be above 100%"},
		{"negative", Config{UsedAbove: probes.Threshold{Value: -1}}, "UsedAbove: threshold -1 must not be negative"},
		{"count at the largest pid_max", Config{UsedAbove: probes.Threshold{Value: MaxPIDLimit}}, ""},
		{"count beyond the largest pid_max", Config{UsedAbove: probes.Threshold{Value: MaxPIDLimit + 1}},
			"UsedAbove: threshold 4194305 is out of range: a count must be a whole number from 0 to 4194304 (the largest pid_max Linux allows, 4Mi)"},
		{"count of 2^64", Config{UsedAbove: probes.Threshold{Value: 1 << 64}}, "UsedAbove: threshold 18446744073709551616 is out of range"},
		{"fractional count", Config{UsedAbove: probes.Threshold{Value: 100.5}}, "UsedAbove: threshold 100.5 is out of range: a count must be a whole number"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, probes.Host{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

func TestProbeRealHost(t *testing.T) {
	probestest.SkipUnlessRealHost(t, "needs Linux /proc")
	got := probestest.CheckRealHost(t, New, Config{UsedAbove: pct(90)}, "pid")
	if len(got.Readings) != 5 {
		t.Errorf("got readings %v, want 5 (no processes counted below the threshold)", got.Readings)
	}
}
