package pid

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// loadavg is a parsed /proc/loadavg:
//
//	0.52 0.58 0.59 3/1234 56789
//
// load averages over 1, 5 and 15 minutes, runnable/total kernel scheduling
// entities (threads), and the last PID allocated.
type loadavg struct {
	Load1, Load5, Load15 float64
	Running, Threads     uint64
	LastPID              uint64
}

// parseLoadavg parses /proc/loadavg. A non-error result has finite,
// non-negative load averages and at least one thread.
func parseLoadavg(data []byte) (loadavg, error) {
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return loadavg{}, errors.New("file is empty")
	}
	if len(f) != 5 {
		return loadavg{}, fmt.Errorf("got %d fields, want 5 (\"load1 load5 load15 running/total lastpid\")", len(f))
	}
	var la loadavg
	for i, dst := range []*float64{&la.Load1, &la.Load5, &la.Load15} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return loadavg{}, fmt.Errorf("field %d: %w", i+1, err)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return loadavg{}, fmt.Errorf("field %d: %q is not a load average", i+1, f[i])
		}
		*dst = v
	}
	running, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return loadavg{}, fmt.Errorf("field 4: %q is not running/total", f[3])
	}
	var err error
	if la.Running, err = strconv.ParseUint(running, 10, 64); err != nil {
		return loadavg{}, fmt.Errorf("field 4: running: %w", err)
	}
	if la.Threads, err = strconv.ParseUint(total, 10, 64); err != nil {
		return loadavg{}, fmt.Errorf("field 4: total: %w", err)
	}
	if la.Threads == 0 {
		return loadavg{}, errors.New("field 4: total threads is 0")
	}
	if la.LastPID, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return loadavg{}, fmt.Errorf("field 5: %w", err)
	}
	return la, nil
}

// parseLimit parses a sysctl file holding one positive integer.
func parseLimit(data []byte) (uint64, error) {
	s := string(bytes.TrimSpace(data))
	if s == "" {
		return 0, errors.New("file is empty")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("limit is 0")
	}
	return n, nil
}
