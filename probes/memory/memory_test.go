package memory

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

func pct(v float64) probes.Threshold { return probes.Threshold{Value: v, Percent: true} }

func TestProbeFixtures(t *testing.T) {
	def := Config{AvailableBelow: pct(5), PSISomeAvg10Above: 20, PSIFullAvg10Above: 10}
	healthyReadings := []probes.Reading{
		{Name: "available", Value: "10 GiB"},
		{Name: "total", Value: "15.6 GiB"},
		{Name: "available_percent", Value: "64.1%"},
		{Name: "psi_some_avg10", Value: "0.00%"},
		{Name: "psi_full_avg10", Value: "0.00%"},
	}
	tests := []struct {
		name         string
		root         string // under testdata/
		cfg          Config
		wantStatus   probes.Status
		wantReason   string
		wantMessage  []string          // substrings
		wantReadings []probes.Reading  // nil: not checked
		wantReading  map[string]string // single readings to check
	}{
		{
			name: "healthy", root: "healthy", cfg: def,
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantMessage:  []string{"available memory 10 GiB (64.1% of 15.6 GiB) is at or above 5%"},
			wantReadings: healthyReadings,
		},
		{
			name: "healthy, no thresholds", root: "healthy", cfg: Config{},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantMessage:  []string{"available memory 10 GiB (64.1% of 15.6 GiB)"},
			wantReadings: healthyReadings,
		},
		{
			name: "low, percent", root: "low", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonLowMemory,
			wantMessage: []string{"available memory 412 MiB (2.6% of 15.6 GiB) is below 5%"},
			wantReading: map[string]string{"available": "412 MiB", "available_percent": "2.6%", "psi_some_avg10": "0.12%"},
		},
		{
			name: "low, absolute", root: "low", cfg: Config{AvailableBelow: probes.Threshold{Value: 512 << 20}},
			wantStatus: probes.StatusProblem, wantReason: ReasonLowMemory,
			wantMessage: []string{"available memory 412 MiB (2.6% of 15.6 GiB) is below 512 MiB"},
		},
		{
			name: "low, absolute threshold below", root: "low", cfg: Config{AvailableBelow: probes.Threshold{Value: 256 << 20}},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantMessage: []string{"is at or above 256 MiB"},
		},
		{
			name: "low, check disabled", root: "low", cfg: Config{},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
		},
		{
			name: "psi some high", root: "psi-some-high", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonMemoryPressureStall,
			wantMessage: []string{"memory pressure stall: some avg10 35.20% is above 20%"},
			wantReading: map[string]string{"psi_some_avg10": "35.20%", "psi_full_avg10": "4.10%"},
		},
		{
			name: "psi some high, check off", root: "psi-some-high", cfg: Config{AvailableBelow: pct(5), PSIFullAvg10Above: 10},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
		},
		{
			name: "psi full high", root: "psi-full-high", cfg: Config{PSIFullAvg10Above: 10},
			wantStatus: probes.StatusProblem, wantReason: ReasonMemoryPressureStall,
			wantMessage: []string{"memory pressure stall: full avg10 25.75% is above 10%"},
		},
		{
			name: "psi some and full high", root: "psi-full-high", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonMemoryPressureStall,
			wantMessage: []string{"some avg10 60.50% is above 20%; memory pressure stall: full avg10 25.75% is above 10%"},
		},
		{
			name: "low and psi high: low memory first", root: "low-and-psi-high", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonLowMemory,
			wantMessage: []string{"is below 5%; memory pressure stall: some avg10 35.20%", "full avg10 25.75% is above 10%"},
		},
		{
			name: "psi missing: checks skipped", root: "psi-missing", cfg: def,
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantReadings: append(append([]probes.Reading(nil), healthyReadings[:3]...), probes.Reading{Name: "psi", Value: "not available"}),
		},
		{
			name: "psi garbage with psi checks", root: "psi-garbage", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"psi-garbage/proc/pressure/memory", `avg10: strconv.ParseFloat: parsing "banana"`},
		},
		{
			name: "low memory seen despite psi garbage", root: "low-psi-garbage", cfg: def,
			wantStatus: probes.StatusProblem, wantReason: ReasonLowMemory,
			wantMessage: []string{"is below 5%; parsing testdata/low-psi-garbage/proc/pressure/memory"},
		},
		{
			name: "psi garbage without psi checks", root: "psi-garbage", cfg: Config{AvailableBelow: pct(5)},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantReading: map[string]string{"available": "10 GiB"},
		},
		{
			name: "psi empty with psi checks", root: "psi-empty", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"psi-empty/proc/pressure/memory: file is empty"},
		},
		{
			name: "psi without full line, full check on", root: "psi-no-full", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{`no "full" line`},
		},
		{
			name: "psi without full line, some check only", root: "psi-no-full", cfg: Config{PSISomeAvg10Above: 20},
			wantStatus: probes.StatusOK, wantReason: ReasonMemoryAvailable,
			wantReading: map[string]string{"psi_some_avg10": "1.00%"},
		},
		{
			name: "meminfo truncated mid-value", root: "meminfo-truncated", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"meminfo-truncated/proc/meminfo", `MemAvailable: value "1048" is not "<number> kB"`},
		},
		{
			name: "meminfo truncated early", root: "meminfo-truncated-early", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"meminfo-truncated-early/proc/meminfo", "no MemAvailable line"},
		},
		{
			name: "meminfo garbage", root: "meminfo-garbage", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"meminfo-garbage/proc/meminfo", "no MemTotal line"},
		},
		{
			name: "meminfo bad number", root: "meminfo-bad-number", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"line 1: MemTotal", `"16x57784"`},
		},
		{
			name: "meminfo empty", root: "meminfo-empty", cfg: Config{},
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"meminfo-empty/proc/meminfo: file is empty"},
		},
		{
			name: "meminfo missing", root: "meminfo-missing", cfg: Config{},
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"reading meminfo", "meminfo-missing/proc/meminfo: no such file or directory"},
		},
		{
			name: "meminfo without MemAvailable", root: "meminfo-old-kernel", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"no MemAvailable line"},
		},
		{
			name: "meminfo available above total", root: "meminfo-available-exceeds-total", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"MemAvailable 2000 kB exceeds MemTotal 1000 kB"},
		},
		{
			name: "no host root at all", root: "does-not-exist", cfg: def,
			wantStatus: probes.StatusUnknown, wantReason: ReasonReadError,
			wantMessage: []string{"does-not-exist/proc/meminfo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := probestest.RunProbe(t, New, tt.cfg, probes.Host{Root: filepath.Join("testdata", tt.root)})
			probestest.CheckResult(t, got, probestest.Want{Status: tt.wantStatus, Reason: tt.wantReason, Message: tt.wantMessage, Readings: tt.wantReadings})
			for name, want := range tt.wantReading {
				if got := reading(got.Readings, name); got != want {
					t.Errorf("got reading %s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func reading(rs []probes.Reading, name string) string {
	for _, r := range rs {
		if r.Name == name {
			return r.Value
		}
	}
	return "<missing>"
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // empty: valid
	}{
		{"zero", Config{}, ""},
		{"typical", Config{AvailableBelow: pct(5), PSISomeAvg10Above: 20, PSIFullAvg10Above: 10}, ""},
		{"percent above 100", Config{AvailableBelow: pct(150)}, "AvailableBelow: threshold 150% must not be above 100%"},
		{"negative bytes", Config{AvailableBelow: probes.Threshold{Value: -1}}, "AvailableBelow: threshold -1 must not be negative"},
		{"psi some negative", Config{PSISomeAvg10Above: -1}, "PSISomeAvg10Above: -1 is not a percentage"},
		{"psi full above 100", Config{PSIFullAvg10Above: 101}, "PSIFullAvg10Above: 101 is not a percentage"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, probes.Host{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

func TestProbeRealHost(t *testing.T) {
	probestest.SkipUnlessRealHost(t, "needs Linux /proc")
	got := probestest.CheckRealHost(t, New, Config{AvailableBelow: pct(5), PSISomeAvg10Above: 50}, "memory")
	if len(got.Readings) < 4 {
		t.Errorf("got readings %v, want available, total, percent and psi", got.Readings)
	}
}

func TestJudgePSI(t *testing.T) {
	const path = "/host/proc/pressure/memory"
	on := Config{PSISomeAvg10Above: 20, PSIFullAvg10Above: 10}
	readErr := errors.New("reading memory PSI: permission denied")
	calm := psi{Some: psiLine{Avg10: 1}, Full: psiLine{Avg10: 0.5}, HasFull: true}
	stalled := psi{Some: psiLine{Avg10: 30}, Full: psiLine{Avg10: 12.5}, HasFull: true}
	tests := []struct {
		name         string
		cfg          Config
		pr           psi
		available    bool
		err          error
		wantReadings string
		wantStalls   string
		wantErr      string
	}{
		{"not available", on, psi{}, false, nil, "psi=not available", "", ""},
		{"unreadable, checks on", on, psi{}, true, readErr, "", "", readErr.Error()},
		{"unreadable, checks off", Config{}, psi{}, true, readErr, "psi=unreadable: " + readErr.Error(), "", ""},
		{"calm", on, calm, true, nil, "psi_some_avg10=1.00% psi_full_avg10=0.50%", "", ""},
		{"stalled", on, stalled, true, nil, "psi_some_avg10=30.00% psi_full_avg10=12.50%",
			"memory pressure stall: some avg10 30.00% is above 20%; memory pressure stall: full avg10 12.50% is above 10%", ""},
		{"stalled, checks off", Config{}, stalled, true, nil, "psi_some_avg10=30.00% psi_full_avg10=12.50%", "", ""},
		{"no full line, full check on", on, psi{Some: psiLine{Avg10: 30}}, true, nil, "psi_some_avg10=30.00%",
			"memory pressure stall: some avg10 30.00% is above 20%", `parsing /host/proc/pressure/memory: no "full" line for PSIFullAvg10Above`},
		{"no full line, full check off", Config{PSISomeAvg10Above: 20}, psi{Some: psiLine{Avg10: 1}}, true, nil, "psi_some_avg10=1.00%", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readings, stalls, err := tt.cfg.judgePSI(path, tt.pr, tt.available, tt.err)
			var got []string
			for _, r := range readings {
				got = append(got, r.Name+"="+r.Value)
			}
			if g := strings.Join(got, " "); g != tt.wantReadings {
				t.Errorf("readings: got %q, want %q", g, tt.wantReadings)
			}
			if g := strings.Join(stalls, "; "); g != tt.wantStalls {
				t.Errorf("stalls: got %q, want %q", g, tt.wantStalls)
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Errorf("error: got %q, want %q", gotErr, tt.wantErr)
			}
		})
	}
}
