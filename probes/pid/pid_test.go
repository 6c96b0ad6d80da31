package pid

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
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
			wantMessage: []string{"threads 1234 (0.5% of threads-max 254610, 3 processes) is at or below 90%"},
			wantReadings: []probes.Reading{
				{Name: "threads", Value: "1234"},
				{Name: "processes", Value: "3"},
				{Name: "pid_max", Value: "4194304"},
				{Name: "threads-max", Value: "254610"},
				{Name: "limit", Value: "254610 (threads-max)"},
				{Name: "used", Value: "0.5%"},
			},
		},
		{
			name: "healthy, check disabled", root: "healthy", cfg: Config{},
			wantStatus: probes.StatusOK, wantReason: ReasonPIDsAvailable,
			wantMessage: []string{"threads 1234 (0.5% of threads-max 254610, 3 processes)"},
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
			p, err := New(tt.cfg, probes.Host{Root: filepath.Join("testdata", tt.root)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			got := p.Probe(context.Background())
			if got.Status != tt.wantStatus || got.Reason != tt.wantReason {
				t.Errorf("got %s/%s, want %s/%s (message %q)", got.Status, got.Reason, tt.wantStatus, tt.wantReason, got.Message)
			}
			for _, want := range tt.wantMessage {
				if !strings.Contains(got.Message, want) {
					t.Errorf("got message %q, want it to contain %q", got.Message, want)
				}
			}
			if tt.wantReadings != nil {
				if len(got.Readings) != len(tt.wantReadings) {
					t.Fatalf("got readings %v, want %v", got.Readings, tt.wantReadings)
				}
				for i := range got.Readings {
					if got.Readings[i] != tt.wantReadings[i] {
						t.Errorf("got reading %d %v, want %v", i, got.Readings[i], tt.wantReadings[i])
					}
				}
			}
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
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, probes.Host{})
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: got error %v, want nil", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestProbeRealHost(t *testing.T) {
	if runtime.GOOS != "linux" && os.Getenv("CI") != "true" {
		t.Skip("needs Linux /proc")
	}
	p, err := New(Config{UsedAbove: pct(90)}, probes.Host{Root: "/"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got, want := p.Name(), "pid"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	got := p.Probe(context.Background())
	if got.Status != probes.StatusOK && got.Status != probes.StatusProblem {
		t.Fatalf("got %s/%s %q, want OK or Problem", got.Status, got.Reason, got.Message)
	}
	if len(got.Readings) != 6 {
		t.Errorf("got readings %v, want 6", got.Readings)
	}
	t.Logf("%s %s: %s %v", got.Status, got.Reason, got.Message, got.Readings)
}
