package memory

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// meminfo holds the /proc/meminfo fields the probe uses.
type meminfo struct {
	TotalBytes     uint64
	AvailableBytes uint64
}

// parseMeminfo parses /proc/meminfo. It is strict about the lines it uses
// (MemTotal and MemAvailable must each appear once as "<n> kB", so a file
// cut off mid-line is an error) and ignores the others, which vary between
// kernels. A non-error result has TotalBytes > 0 and AvailableBytes <=
// TotalBytes.
func parseMeminfo(data []byte) (meminfo, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return meminfo{}, errors.New("file is empty")
	}
	var (
		m                    meminfo
		haveTotal, haveAvail bool
	)
	for i, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		var seen *bool
		switch key {
		case "MemTotal":
			dst, seen = &m.TotalBytes, &haveTotal
		case "MemAvailable":
			dst, seen = &m.AvailableBytes, &haveAvail
		default:
			continue
		}
		if *seen {
			return meminfo{}, fmt.Errorf("line %d: %s appears twice", i+1, key)
		}
		b, err := parseKB(value)
		if err != nil {
			return meminfo{}, fmt.Errorf("line %d: %s: %w", i+1, key, err)
		}
		*dst, *seen = b, true
	}
	switch {
	case !haveTotal:
		return meminfo{}, errors.New("no MemTotal line")
	case !haveAvail:
		return meminfo{}, errors.New("no MemAvailable line (kernel older than 3.14?)")
	case m.TotalBytes == 0:
		return meminfo{}, errors.New("MemTotal is 0")
	case m.AvailableBytes > m.TotalBytes:
		return meminfo{}, fmt.Errorf("MemAvailable %d kB exceeds MemTotal %d kB", m.AvailableBytes/1024, m.TotalBytes/1024)
	}
	return m, nil
}

// parseKB parses a meminfo value "   16357784 kB" into bytes.
func parseKB(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("value %q is not \"<number> kB\"", strings.TrimSpace(s))
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q: %w", f[0], err)
	}
	if v > math.MaxUint64/1024 {
		return 0, fmt.Errorf("value %d kB is too large", v)
	}
	return v * 1024, nil
}

// psiLine is one line of a /proc/pressure file: the share of wall time, in
// percent over 10s, 60s and 300s windows, in which tasks stalled, and the
// total stall time in microseconds.
type psiLine struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// psi is a parsed /proc/pressure/memory.
type psi struct {
	Some    psiLine
	Full    psiLine
	HasFull bool // kernels print "full" for memory; keep it optional anyway
}

// parsePSI parses a pressure file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// The "some" line is required, "full" optional; each line needs avg10,
// avg60, avg300 and total (unknown keys are ignored for future kernels), and
// averages must be percentages in [0, 100].
func parsePSI(data []byte) (psi, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return psi{}, errors.New("file is empty")
	}
	var (
		p        psi
		haveSome bool
	)
	for i, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var dst *psiLine
		var seen *bool
		switch fields[0] {
		case "some":
			dst, seen = &p.Some, &haveSome
		case "full":
			dst, seen = &p.Full, &p.HasFull
		default:
			return psi{}, fmt.Errorf("line %d: want \"some\" or \"full\", got %q", i+1, fields[0])
		}
		if *seen {
			return psi{}, fmt.Errorf("line %d: %q appears twice", i+1, fields[0])
		}
		l, err := parsePSILine(fields[1:])
		if err != nil {
			return psi{}, fmt.Errorf("line %d (%s): %w", i+1, fields[0], err)
		}
		*dst, *seen = l, true
	}
	if !haveSome {
		return psi{}, errors.New("no \"some\" line")
	}
	return p, nil
}

func parsePSILine(fields []string) (psiLine, error) {
	var (
		l    psiLine
		seen = map[string]bool{}
	)
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return psiLine{}, fmt.Errorf("field %q is not key=value", f)
		}
		var avg *float64
		switch k {
		case "avg10":
			avg = &l.Avg10
		case "avg60":
			avg = &l.Avg60
		case "avg300":
			avg = &l.Avg300
		case "total":
		default:
			continue
		}
		if seen[k] {
			return psiLine{}, fmt.Errorf("%s appears twice", k)
		}
		seen[k] = true
		if avg == nil {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return psiLine{}, fmt.Errorf("total: %w", err)
			}
			l.Total = n
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return psiLine{}, fmt.Errorf("%s: %w", k, err)
		}
		if !finitePercent(x) {
			return psiLine{}, fmt.Errorf("%s=%s is not a percentage", k, v)
		}
		*avg = x
	}
	for _, k := range []string{"avg10", "avg60", "avg300", "total"} {
		if !seen[k] {
			return psiLine{}, fmt.Errorf("no %s", k)
		}
	}
	return l, nil
}
