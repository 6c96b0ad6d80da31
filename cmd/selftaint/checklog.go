package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes/logmon"
)

// logMatchesShown is how many of a log monitor's last matches check shows.
const logMatchesShown = 5

// logMonitorReport is one system-log-monitor file (checks.npdLogConfigs)
// in selftaint check: its conditions as the agent would write them and
// the last lines its rules matched.
type logMonitorReport struct {
	Config    string `json:"config"`
	Source    string `json:"source,omitempty"`
	Plugin    string `json:"plugin"`
	Log       string `json:"log"`
	LinesRead uint64 `json:"linesRead"`
	// Error is why the log could not be read.
	Error      string         `json:"error,omitempty"`
	Conditions []logCondition `json:"conditions,omitempty"`
	// Matches are the last logMatchesShown matches, oldest first.
	Matches []logMatch `json:"matches,omitempty"`
}

// logCondition is one of a log monitor's conditions.
type logCondition struct {
	Type    corev1.NodeConditionType `json:"type"`
	Status  corev1.ConditionStatus   `json:"status"`
	Reason  string                   `json:"reason"`
	Message string                   `json:"message"`
	// Since is when it last changed: its first matched line's time, or
	// when matching started.
	Since time.Time `json:"since"`
}

// logMatch is one rule that matched.
type logMatch struct {
	// Rule is the rule's reason.
	Rule string `json:"rule"`
	// Kind is "permanent" (it sets Condition) or "temporary" (an Event).
	Kind      string `json:"kind"`
	Condition string `json:"condition,omitempty"`
	// Reported: the Event was recorded before the agent restarted (the
	// line was read again within lookback), so not again.
	Reported bool      `json:"reported,omitempty"`
	Lines    []logLine `json:"lines"`
}

// logLine is one line a rule matched.
type logLine struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// logMonitors returns the log monitors behind specs, once each, in spec
// order, with one of each's probes (to start its source).
func logMonitors(specs []agent.ProbeSpec) ([]*logmon.Monitor, []*logmon.Probe) {
	var mons []*logmon.Monitor
	var ps []*logmon.Probe
	for _, s := range specs {
		p, ok := s.Entry.Probe.(*logmon.Probe)
		if !ok {
			continue
		}
		seen := false
		for _, m := range mons {
			seen = seen || m == p.Monitor()
		}
		if !seen {
			mons, ps = append(mons, p.Monitor()), append(ps, p)
		}
	}
	return mons, ps
}

// readLogs starts the log monitors' sources and waits until every one has
// failed, or has read no new line for quiet, or wait has passed: what the
// logs hold is then matched. Stop the sources by closing the monitors.
func readLogs(ctx context.Context, mons []*logmon.Monitor, ps []*logmon.Probe, quiet, wait time.Duration) {
	if len(ps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, p := range ps {
		go func() { _ = p.Watch(ctx, func() {}) }() // its error is in the View
	}
	last := make([]uint64, len(mons))
	since := make([]time.Time, len(mons))
	tick := time.NewTicker(min(quiet, 50*time.Millisecond))
	defer tick.Stop()
	for {
		now := time.Now()
		settled := true
		for i, m := range mons {
			v := m.View()
			if v.Err != "" {
				continue
			}
			if !v.Started || v.LinesRead != last[i] || since[i].IsZero() {
				last[i], since[i] = v.LinesRead, now
			}
			settled = settled && v.Started && now.Sub(since[i]) >= quiet
		}
		if settled {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// logReports is what each monitor has read and matched, its conditions'
// status, reason and message taken from check's rows (what the agent
// would write).
func logReports(mons []*logmon.Monitor, rows []checkRow) []logMonitorReport {
	var out []logMonitorReport
	for _, m := range mons {
		out = append(out, logReport(m.View(), rows))
	}
	return out
}

// logReport is one monitor's report from its view and check's rows.
func logReport(v logmon.View, rows []checkRow) logMonitorReport {
	r := logMonitorReport{Config: v.Config, Source: v.Source, Plugin: v.Plugin, Log: v.Log, LinesRead: v.LinesRead, Error: v.Err}
	for _, c := range v.Conditions {
		lc := logCondition{Type: corev1.NodeConditionType(c.Type), Status: corev1.ConditionFalse, Reason: c.Reason, Message: c.Message, Since: c.Since}
		if c.Problem {
			lc.Status = corev1.ConditionTrue
		}
		for _, row := range rows {
			if row.Condition == lc.Type && row.Probe == logmon.ProbeNamePrefix+c.Type {
				lc.Status, lc.Reason, lc.Message = row.ConditionStatus, row.Reason, row.Message
			}
		}
		r.Conditions = append(r.Conditions, lc)
	}
	recent := v.Recent[max(0, len(v.Recent)-logMatchesShown):]
	for _, m := range recent {
		lm := logMatch{Rule: m.Reason, Kind: "temporary", Reported: m.Reported}
		if m.Permanent {
			lm.Kind, lm.Condition = "permanent", m.Condition
		}
		for _, l := range m.Lines {
			lm.Lines = append(lm.Lines, logLine{Time: l.Time, Message: l.Message})
		}
		r.Matches = append(r.Matches, lm)
	}
	return r
}

// logTime is how check writes a log line's time: UTC, to the millisecond.
func logTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// oneLine puts a multi-line message (a match spanning lines) on one line.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " | ")
}

// printLogMonitors writes the log monitors' section of check's table
// output.
func printLogMonitors(w io.Writer, reps []logMonitorReport) error {
	if len(reps) == 0 {
		return nil
	}
	fmt.Fprintln(w, "Log monitors (checks.npdLogConfigs):")
	for _, r := range reps {
		fmt.Fprintf(w, "  %s: %s log %s, %d lines read\n", r.Config, r.Plugin, r.Log, r.LinesRead)
		if r.Error != "" {
			fmt.Fprintf(w, "    cannot read it: %s\n", r.Error)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if len(r.Conditions) > 0 {
			fmt.Fprintln(tw, "    CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
			for _, c := range r.Conditions {
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, logTime(c.Since), oneLine(c.Message))
			}
		}
		if len(r.Matches) == 0 {
			fmt.Fprintln(tw, "    no line matched a rule")
		} else {
			fmt.Fprintf(tw, "    The last %d lines rules matched, oldest first:\n", logMatchesShown)
			fmt.Fprintln(tw, "    TIME\tRULE\tKIND\tLINE")
			for _, m := range r.Matches {
				printLogMatch(tw, m)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	return nil
}

// printLogMatch writes one match: its lines, oldest first, the rule and
// its kind on the first.
func printLogMatch(tw io.Writer, m logMatch) {
	kind := m.Kind
	switch {
	case m.Condition != "":
		kind += " " + m.Condition
	case m.Reported:
		kind += " (Event recorded before a restart)"
	}
	for i, l := range m.Lines {
		rule, k := m.Rule, kind
		if i > 0 {
			rule, k = "", ""
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", logTime(l.Time), rule, k, l.Message)
	}
}
