// Package pid is selftaint's PID probe. It exists so a node that is running
// out of process IDs (a fork bomb, a thread leak) is tainted before new
// containers, exec probes and the kubelet itself start failing to fork. Every
// thread takes a PID, so it counts threads against the lower of the kernel's
// pid_max and threads-max.
package pid

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/selftaint/selftaint/probes"
)

// Name is the PID probe's name.
const Name = "pid"

// Reasons the PID probe reports.
const (
	// ReasonPIDsAvailable: threads in use are within the threshold.
	ReasonPIDsAvailable = "PIDsAvailable"
	// ReasonPIDExhaustion: threads in use are above Config.UsedAbove.
	ReasonPIDExhaustion = "PIDExhaustion"
	// ReasonReadError: a source file is missing, unreadable or garbage.
	ReasonReadError = probes.ReasonReadError
)

// MaxPIDLimit is the largest kernel.pid_max Linux allows (PID_MAX_LIMIT on
// 64-bit systems): no count of threads in use can exceed it.
const MaxPIDLimit = 4 << 20

// Config says when PID use is a problem.
type Config struct {
	// UsedAbove flags the node when the threads in use exceed it: a
	// percentage of the limit, or a count (a whole number up to
	// MaxPIDLimit). Zero disables the check.
	UsedAbove probes.Threshold
}

// Validate checks the threshold.
// A problem is a *probes.ConfigError naming the field.
func (c Config) Validate() error {
	var errs []probes.FieldError
	if err := c.UsedAbove.ValidateCount(MaxPIDLimit, "the largest pid_max Linux allows, 4Mi"); err != nil {
		errs = append(errs, probes.FieldError{Field: "UsedAbove", Detail: err.Error()})
	}
	return probes.NewConfigError(Name, errs)
}

// Probe is the PID probe. It is safe for concurrent use.
type Probe struct {
	cfg  Config
	host probes.Host
}

// New returns a PID probe that reads the host under host.Root.
func New(cfg Config, host probes.Host) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Probe{cfg: cfg, host: host}, nil
}

// Name returns "pid".
func (p *Probe) Name() string { return Name }

// Probe reads the limits and the threads in use once.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	pidMax, err := readLimit(p.host.Proc("sys", "kernel", "pid_max"))
	if err != nil {
		return readError(err)
	}
	threadsMax, err := readLimit(p.host.Proc("sys", "kernel", "threads-max"))
	if err != nil {
		return readError(err)
	}
	path := p.host.Proc("loadavg")
	data, err := probes.ReadFile(path)
	if err != nil {
		return readError(fmt.Errorf("reading loadavg: %w", err))
	}
	la, err := parseLoadavg(data)
	if err != nil {
		return readError(fmt.Errorf("parsing %s: %w", path, err))
	}
	limit, which := pidMax, "pid_max"
	if threadsMax < pidMax {
		limit, which = threadsMax, "threads-max"
	}
	used := float64(la.Threads) / float64(limit) * 100
	readings := []probes.Reading{
		{Name: "threads", Value: strconv.FormatUint(la.Threads, 10)},
		{Name: "pid_max", Value: strconv.FormatUint(pidMax, 10)},
		{Name: "threads-max", Value: strconv.FormatUint(threadsMax, 10)},
		{Name: "limit", Value: fmt.Sprintf("%d (%s)", limit, which)},
		{Name: "used", Value: fmt.Sprintf("%.1f%%", used)},
	}
	t := p.cfg.UsedAbove
	if !t.IsZero() && float64(la.Threads) > t.Of(float64(limit)) {
		// Only now are the processes counted: walking /proc costs more
		// than the rest of the run together, and the count matters only
		// to whoever looks for what is leaking threads. A failure to
		// count does not hide the problem.
		processes := "processes not counted"
		if n, err := countProcesses(p.host.Proc()); err != nil {
			processes += ": " + err.Error()
		} else {
			processes = fmt.Sprintf("%d processes", n)
			readings = append(readings, probes.Reading{Name: "processes", Value: strconv.FormatUint(n, 10)})
		}
		return probes.Result{
			Status:   probes.StatusProblem,
			Reason:   ReasonPIDExhaustion,
			Message:  fmt.Sprintf("threads %d (%.1f%% of %s %d, %s) is above %s", la.Threads, used, which, limit, processes, formatCount(t)),
			Readings: readings,
		}
	}
	summary := fmt.Sprintf("threads %d (%.1f%% of %s %d)", la.Threads, used, which, limit)
	if !t.IsZero() {
		summary += " is at or below " + formatCount(t)
	}
	return probes.Result{Status: probes.StatusOK, Reason: ReasonPIDsAvailable, Message: summary, Readings: readings}
}

func readError(err error) probes.Result {
	return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: err.Error()}
}

// readLimit reads a positive integer sysctl such as pid_max.
func readLimit(path string) (uint64, error) {
	data, err := probes.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading limit: %w", err)
	}
	n, err := parseLimit(data)
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", path, err)
	}
	return n, nil
}

// countProcesses counts the numeric directories in a /proc: one per
// process (thread group) in its PID namespace.
func countProcesses(proc string) (uint64, error) {
	f, err := os.Open(proc)
	if err != nil {
		return 0, fmt.Errorf("counting processes: %w", err)
	}
	defer f.Close()
	var n uint64
	for {
		// Batches rather than os.ReadDir, which holds and sorts every
		// name at once.
		entries, err := f.ReadDir(1024)
		for _, e := range entries {
			if e.IsDir() && isDigits(e.Name()) {
				n++
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("counting processes in %s: %w", proc, err)
		}
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// formatCount formats a threshold on a count: "90%" or "30000".
func formatCount(t probes.Threshold) string {
	if t.Percent {
		return t.String()
	}
	return strconv.FormatFloat(t.Value, 'f', -1, 64)
}
