package testcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// The start's limit and progress. A control plane starts in seconds on an
// idle machine and in minutes on two cores shared with builds and other
// tests: the limit is generous, and a start that takes long says, while it
// waits, which component it is waiting for and what that one answers.
const (
	// DefaultStartTimeout bounds a whole start (every component together)
	// when Options.StartTimeout is zero.
	DefaultStartTimeout = 3 * time.Minute
	// DefaultProgressInterval is how often Options.Progress hears of a
	// start that is still waiting.
	DefaultProgressInterval = 10 * time.Second
	// StartTimeoutEnv is the environment variable Start and Shared read
	// for the start limit of the tests' control planes (a Go duration,
	// such as 5m) when Options.StartTimeout is zero.
	StartTimeoutEnv = "TESTCP_START_TIMEOUT"
)

// ErrStartTimeout is the cause of a *ComponentError for a component that
// was not ready when the start's limit (Options.StartTimeout) ran out.
var ErrStartTimeout = errors.New("the start's limit ran out")

// ComponentTime is how long one component took to become ready (or, for
// the one a failed start was waiting for, how long it was waited for).
type ComponentTime struct {
	Component string
	Took      time.Duration
}

// FormatTimes writes times as "etcd 1.2s, kube-apiserver 4.5s".
func FormatTimes(times []ComponentTime) string {
	parts := make([]string, len(times))
	for i, ct := range times {
		parts[i] = ct.Component + " " + roundDuration(ct.Took).String()
	}
	return strings.Join(parts, ", ")
}

// Slowest is the component of times that took longest ("" for none).
func Slowest(times []ComponentTime) string {
	slowest := ComponentTime{}
	for _, ct := range times {
		if ct.Took > slowest.Took || slowest.Component == "" {
			slowest = ct
		}
	}
	return slowest.Component
}

// roundDuration rounds d for people: tenths of a second.
func roundDuration(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// Progress is a start still waiting: the components ready so far and the
// one it is waiting for.
type Progress struct {
	// Ready are the components ready so far, in start order.
	Ready []ComponentTime
	// Waiting is the component awaited, Check what is asked of it (such
	// as "/readyz") and Waited how long it has been awaited.
	Waiting, Check string
	Waited         time.Duration
	// LastAnswer is, in short, why its last check failed.
	LastAnswer string
	// Elapsed is the time since the start began, Limit the start's limit.
	Elapsed, Limit time.Duration
}

// String is one line: "12s of 3m0s: waiting for kube-apiserver (/readyz)
// for 10.1s: failing etcd; ready: etcd 1.9s".
func (p Progress) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %s: waiting for %s (%s) for %s", roundDuration(p.Elapsed), p.Limit, p.Waiting, p.Check, roundDuration(p.Waited))
	if p.LastAnswer != "" {
		fmt.Fprintf(&b, ": %s", p.LastAnswer)
	}
	if len(p.Ready) > 0 {
		fmt.Fprintf(&b, "; ready: %s", FormatTimes(p.Ready))
	}
	return b.String()
}

// checkError is a readiness check answered with something other than 200.
type checkError struct {
	path, status string
	body         []byte
}

// Error says what answered, in short: the failing checks of a /readyz or
// /healthz answer ("500: failing etcd, poststarthook/rbac/bootstrap-roles"),
// else the first line of the body.
func (e *checkError) Error() string {
	var failing []string
	first := ""
	for _, l := range strings.Split(string(e.body), "\n") {
		l = strings.TrimSpace(l)
		if first == "" {
			first = l
		}
		if name, ok := strings.CutPrefix(l, "[-]"); ok {
			name, _, _ = strings.Cut(name, " ")
			failing = append(failing, name)
		}
	}
	switch {
	case len(failing) > 0:
		return fmt.Sprintf("%s %s: failing %s", e.path, e.status, strings.Join(failing, ", "))
	case first != "":
		return fmt.Sprintf("%s %s: %s", e.path, e.status, shorten(first, 160))
	}
	return e.path + " " + e.status
}

// describeCheck says in short why a readiness check failed: the answer's
// failing checks, or that nothing answers yet.
func describeCheck(path string, err error) string {
	var ce *checkError
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ce):
		return ce.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return path + ": nothing listening yet (connection refused)"
	case errors.As(err, &ne) && ne.Timeout():
		return path + ": no answer within the check's timeout"
	}
	return shorten(err.Error(), 200)
}

// klogHeader is the header of a klog line: "E1127 10:00:00.100000    4242 run.go:72] ".
var klogHeader = regexp.MustCompile(`^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]*\] `)

// logReason is the line of a component's log (its tail) that best says
// why it failed, without its klog header: the last error or fatal line
// (klog E/F, "Error: ...", etcd's "level":"fatal"/"error"), else, with
// anyLine, the last line it wrote; "" when there is none.
func logReason(tail string, anyLine bool) string {
	lines := strings.Split(tail, "\n")
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== testcp ") || strings.HasPrefix(l, "(no log: ") {
			continue
		}
		if last == "" {
			last = l
		}
		if m := klogHeader.FindStringSubmatch(l); m != nil {
			if m[1] == "E" || m[1] == "F" {
				return shorten(l[len(m[0]):], 200)
			}
			continue
		}
		if strings.HasPrefix(l, "Error: ") || strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"panic"`) {
			return shorten(l, 200)
		}
	}
	if !anyLine {
		return ""
	}
	if m := klogHeader.FindString(last); m != "" {
		last = last[len(m):]
	}
	return shorten(last, 200)
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// startTimeoutFromEnv is opts with StartTimeout from $TESTCP_START_TIMEOUT
// when opts has none.
func startTimeoutFromEnv(opts Options) (Options, error) {
	v := os.Getenv(StartTimeoutEnv)
	if opts.StartTimeout != 0 || v == "" {
		return opts, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return opts, fmt.Errorf("testcp: $%s=%q: want a positive duration such as 5m", StartTimeoutEnv, v)
	}
	opts.StartTimeout = d
	return opts, nil
}
