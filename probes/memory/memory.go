// Package memory is selftaint's memory probe. It exists so a node that is
// running out of memory, or stalling on memory reclaim, is tainted before the
// kernel's OOM killer or the kubelet's eviction manager start killing pods at
// random. It reads MemTotal and MemAvailable from the host's /proc/meminfo
// and, where the kernel has pressure stall information (PSI, Linux 4.20+ with
// CONFIG_PSI), /proc/pressure/memory.
package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// Name is the memory probe's name.
const Name = "memory"

// Reasons the memory probe reports.
const (
	// ReasonMemoryAvailable: enough memory is available and nothing stalls.
	ReasonMemoryAvailable = "MemoryAvailable"
	// ReasonLowMemory: MemAvailable is below Config.AvailableBelow.
	ReasonLowMemory = "LowMemory"
	// ReasonMemoryPressureStall: a PSI avg10 is above its threshold.
	ReasonMemoryPressureStall = "MemoryPressureStall"
	// ReasonReadError: meminfo (or, with PSI checks on, the pressure file)
	// is missing, unreadable or garbage.
	ReasonReadError = probes.ReasonReadError
)

// Config says when memory is a problem. Zero values disable checks.
type Config struct {
	// AvailableBelow flags memory as low when MemAvailable is below it:
	// a percentage of MemTotal, or an amount of bytes.
	AvailableBelow probes.Threshold
	// PSISomeAvg10Above flags a stall when the share of the last 10s in
	// which at least one task waited on memory, in percent, is above it.
	// 0 disables the check.
	PSISomeAvg10Above float64
	// PSIFullAvg10Above flags a stall when the share of the last 10s in
	// which all non-idle tasks waited on memory, in percent, is above it.
	// 0 disables the check.
	PSIFullAvg10Above float64
}

// Validate checks that thresholds are in range.
// A problem is a *probes.ConfigError naming each field.
func (c Config) Validate() error {
	var errs []probes.FieldError
	if err := c.AvailableBelow.Validate(); err != nil {
		errs = append(errs, probes.FieldError{Field: "AvailableBelow", Detail: err.Error()})
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"PSISomeAvg10Above", c.PSISomeAvg10Above}, {"PSIFullAvg10Above", c.PSIFullAvg10Above}} {
		if !(f.v >= 0 && f.v <= 100) {
			errs = append(errs, probes.FieldError{Field: f.name, Detail: fmt.Sprintf("%v is not a percentage between 0 and 100 (0 turns the check off)", f.v)})
		}
	}
	return probes.NewConfigError(Name, errs)
}

// Defaults of the PSI trigger that wakes the probe (see Probe.Watch).
const (
	// DefaultWakeStall is how long tasks must stall on memory within
	// WakeWindow for the kernel to wake the probe: 5% of it.
	DefaultWakeStall = 100 * time.Millisecond
	// WakeWindow is the trigger's window: the least the kernel allows
	// without CAP_SYS_RESOURCE (a multiple of 2s).
	WakeWindow = 2 * time.Second
)

// Probe is the memory probe. It is safe for concurrent use.
type Probe struct {
	cfg  Config
	host probes.Host
	// wakeStall is the PSI trigger's stall time (DefaultWakeStall).
	wakeStall time.Duration
	// armed, if set, is called once Watch's trigger is armed; tests wait
	// for it before squeezing memory.
	armed func()
}

// New returns a memory probe that reads the host under host.Root.
func New(cfg Config, host probes.Host) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Probe{cfg: cfg, host: host, wakeStall: DefaultWakeStall}, nil
}

// Name returns "memory".
func (p *Probe) Name() string { return Name }

// Watch implements probes.Waker: it arms a PSI trigger on the host's
// /proc/pressure/memory (tasks stalled on memory for DefaultWakeStall
// within WakeWindow) and wakes the probe each time the kernel fires it.
// Where the kernel cannot (no CONFIG_PSI, psi=0, not Linux) it returns an
// error saying so, and the probe runs only on its interval.
func (p *Probe) Watch(ctx context.Context, wake func()) error {
	return watchPSI(ctx, p.host.Proc("pressure", "memory"), p.wakeStall, WakeWindow, wake, p.armed)
}

// Probe reads meminfo and PSI once and judges them against the config.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	path := p.host.Proc("meminfo")
	data, err := probes.ReadFile(path)
	if err != nil {
		return readError(nil, fmt.Errorf("reading meminfo: %w", err))
	}
	m, err := parseMeminfo(data)
	if err != nil {
		return readError(nil, fmt.Errorf("parsing %s: %w", path, err))
	}

	total, avail := float64(m.TotalBytes), float64(m.AvailableBytes)
	pct := avail / total * 100
	readings := []probes.Reading{
		{Name: "available", Value: probes.FormatBytes(avail)},
		{Name: "total", Value: probes.FormatBytes(total)},
		{Name: "available_percent", Value: fmt.Sprintf("%.1f%%", pct)},
	}
	summary := fmt.Sprintf("available memory %s (%.1f%% of %s)", probes.FormatBytes(avail), pct, probes.FormatBytes(total))

	var reason string
	var problems []string
	if t := p.cfg.AvailableBelow; !t.IsZero() && avail < t.Of(total) {
		reason = ReasonLowMemory
		problems = append(problems, fmt.Sprintf("%s is below %s", summary, probes.FormatThreshold(t)))
	}

	psiPath := p.host.Proc("pressure", "memory")
	pr, available, err := readPSI(psiPath)
	psiReadings, stalls, psiErr := p.cfg.judgePSI(psiPath, pr, available, err)
	readings = append(readings, psiReadings...)
	if reason == "" && len(stalls) > 0 {
		reason = ReasonMemoryPressureStall
	}
	problems = append(problems, stalls...)

	if len(problems) > 0 {
		// A PSI read error does not hide a problem we did see.
		if psiErr != nil {
			problems = append(problems, psiErr.Error())
		}
		return probes.Result{Status: probes.StatusProblem, Reason: reason, Message: strings.Join(problems, "; "), Readings: readings}
	}
	if psiErr != nil {
		return readError(readings, psiErr)
	}
	msg := summary
	if t := p.cfg.AvailableBelow; !t.IsZero() {
		msg += " is at or above " + probes.FormatThreshold(t)
	}
	return probes.Result{Status: probes.StatusOK, Reason: ReasonMemoryAvailable, Message: msg, Readings: readings}
}

// judgePSI judges what readPSI returned against the PSI thresholds. It
// returns the PSI readings, the stalls found and, when a PSI check is on
// but cannot be done, why.
func (c Config) judgePSI(path string, pr psi, available bool, err error) (readings []probes.Reading, stalls []string, psiErr error) {
	psiOn := c.PSISomeAvg10Above > 0 || c.PSIFullAvg10Above > 0
	switch {
	case !available:
		return []probes.Reading{{Name: "psi", Value: "not available"}}, nil, nil
	case err != nil && psiOn:
		return nil, nil, err
	case err != nil:
		// No PSI check depends on it: show it, but judge meminfo alone.
		return []probes.Reading{{Name: "psi", Value: "unreadable: " + err.Error()}}, nil, nil
	}
	readings = append(readings, probes.Reading{Name: "psi_some_avg10", Value: fmt.Sprintf("%.2f%%", pr.Some.Avg10)})
	if pr.HasFull {
		readings = append(readings, probes.Reading{Name: "psi_full_avg10", Value: fmt.Sprintf("%.2f%%", pr.Full.Avg10)})
	}
	stalls, psiErr = c.psiStalls(path, pr)
	return readings, stalls, psiErr
}

// psiStalls returns the stalls pr shows above the thresholds, and an
// error when the full check is on but the file at path has no "full" line.
func (c Config) psiStalls(path string, pr psi) (stalls []string, err error) {
	if t := c.PSISomeAvg10Above; t > 0 && pr.Some.Avg10 > t {
		stalls = append(stalls, fmt.Sprintf("memory pressure stall: some avg10 %.2f%% is above %g%%", pr.Some.Avg10, t))
	}
	if t := c.PSIFullAvg10Above; t > 0 {
		if !pr.HasFull {
			err = fmt.Errorf("parsing %s: no \"full\" line for PSIFullAvg10Above", path)
		} else if pr.Full.Avg10 > t {
			stalls = append(stalls, fmt.Sprintf("memory pressure stall: full avg10 %.2f%% is above %g%%", pr.Full.Avg10, t))
		}
	}
	return stalls, err
}

// readPSI reads and parses the pressure file at path. It reports the
// kernel has no memory PSI (available false, no error) when the file does
// not exist (no CONFIG_PSI, or booted with psi=0 on kernels that then hide
// it) or refuses reads with EOPNOTSUPP (psi=0 on older kernels).
func readPSI(path string) (p psi, available bool, err error) {
	data, err := probes.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) {
		return psi{}, false, nil
	}
	if err != nil {
		return psi{}, true, fmt.Errorf("reading memory PSI: %w", err)
	}
	p, err = parsePSI(data)
	if err != nil {
		return psi{}, true, fmt.Errorf("parsing %s: %w", path, err)
	}
	return p, true, nil
}

func readError(readings []probes.Reading, err error) probes.Result {
	return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: err.Error(), Readings: readings}
}

// finitePercent reports whether v is a sane percentage.
func finitePercent(v float64) bool {
	return !math.IsNaN(v) && v >= 0 && v <= 100
}
