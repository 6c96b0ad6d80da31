package logmon

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

var t0 = time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustParse(t *testing.T, s string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(s), "test.json")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStartTime(t *testing.T) {
	boot := t0.Add(-time.Hour)
	tests := []struct {
		name            string
		lookback, delay time.Duration
		want            time.Time
	}{
		{"no lookback: now", 0, 0, t0},
		{"lookback inside uptime", 5 * time.Minute, 0, t0.Add(-5 * time.Minute)},
		{"lookback past boot: boot", 2 * time.Hour, 0, boot},
		{"delay after boot", 2 * time.Hour, 10 * time.Minute, boot.Add(10 * time.Minute)},
		{"delay past lookback", 5 * time.Minute, 58 * time.Minute, boot.Add(58 * time.Minute)},
	}
	for _, tt := range tests {
		if got := StartTime(t0, boot, tt.lookback, tt.delay); !got.Equal(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestKernelMonitorRules: kernel-monitor.json and readonly-monitor.json,
// unchanged, on the lines the kernel prints.
func TestKernelMonitorRules(t *testing.T) {
	const oom = "Out of memory: Killed process 4242 (stress) total-vm:1048576kB, anon-rss:1000000kB, file-rss:0kB, shmem-rss:0kB"
	const hung = "INFO: task docker:1234 blocked for more than 120 seconds."
	tests := []struct {
		name       string
		config     string
		lines      []string
		wantEvents []probes.Event
		wantConds  map[string]string // type -> reason of a condition in Problem
	}{
		{"nothing", "kernel-monitor.json", []string{"usb 1-1: new high-speed USB device"}, nil, nil},
		{"OOM kill", "kernel-monitor.json", []string{oom}, []probes.Event{{Reason: "OOMKilling", Message: oom}}, nil},
		{"docker hung: event and condition", "kernel-monitor.json", []string{hung},
			[]probes.Event{{Reason: "TaskHung", Message: hung}}, map[string]string{"KernelDeadlock": "DockerHung"}},
		{"other task hung: event only", "kernel-monitor.json", []string{"INFO: task kworker/0:1:77 blocked for more than 120 seconds."},
			[]probes.Event{{Reason: "TaskHung", Message: "INFO: task kworker/0:1:77 blocked for more than 120 seconds."}}, nil},
		{"xfs", "kernel-monitor.json", []string{"XFS (sda1): Corruption detected. Shutting down filesystem"}, nil, map[string]string{"XfsShutdown": "XfsHasShutdown"}},
		{"CPER fatal", "kernel-monitor.json", []string{"{1}[Hardware Error]: event severity: fatal"}, nil, map[string]string{"CperHardwareErrorFatal": "CperHardwareErrorFatal"}},
		{"read-only remount", "readonly-monitor.json", []string{"EXT4-fs (sda1): Remounting filesystem read-only"}, nil, map[string]string{"ReadonlyFilesystem": "FilesystemIsReadOnly"}},
		{"a later unrelated line counts nothing twice", "kernel-monitor.json", []string{oom, "eth0: link up"},
			[]probes.Event{{Reason: "OOMKilling", Message: oom}}, nil},
		{"whitespace trimmed", "kernel-monitor.json", []string{"  " + oom + "\n"}, []probes.Event{{Reason: "OOMKilling", Message: oom}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMatcher(mustLoad(t, "testdata/npd/"+tt.config), t0)
			for i, l := range tt.lines {
				m.Push(Line{Time: t0.Add(time.Duration(i) * time.Second), Message: l}, t0)
			}
			if got := m.TakeEvents(); !reflect.DeepEqual(got, tt.wantEvents) {
				t.Errorf("events: got %+v, want %+v", got, tt.wantEvents)
			}
			got := map[string]string{}
			for _, c := range m.Conditions() {
				if c.Problem {
					got[c.Type] = c.Reason
				}
			}
			if len(got) != len(tt.wantConds) || (len(got) > 0 && !reflect.DeepEqual(got, tt.wantConds)) {
				t.Errorf("conditions in Problem: got %v, want %v", got, tt.wantConds)
			}
		})
	}
}

// TestConditionStaysAndKeepsFirstMatch: a permanent condition keeps the
// time and message of the line that set it while the same rule matches
// again; a different rule's reason replaces them.
func TestConditionStaysAndKeepsFirstMatch(t *testing.T) {
	m := NewMatcher(mustParse(t, `{"plugin": "kmsg", "conditions": [{"type": "Disk", "reason": "DiskFine", "message": "fine"}],
"rules": [{"type": "permanent", "condition": "Disk", "reason": "A", "pattern": "a\\d"},
 {"type": "permanent", "condition": "Disk", "reason": "B", "pattern": "b\\d", "patternGeneratedMessageSuffix": "see runbook"}]}`), t0)
	want := ConditionState{Type: "Disk", Reason: "DiskFine", Message: "fine", Since: t0}
	if got := m.Conditions()[0]; got != want {
		t.Fatalf("default: got %v, want %v", got, want)
	}
	m.Push(Line{Time: t0.Add(time.Second), Message: "a1"}, t0)
	m.Push(Line{Time: t0.Add(2 * time.Second), Message: "a2"}, t0)
	want = ConditionState{Type: "Disk", Problem: true, Reason: "A", Message: "a1", Since: t0.Add(time.Second)}
	if got := m.Conditions()[0]; got != want {
		t.Errorf("after a1, a2: got %v, want %v", got, want)
	}
	m.Push(Line{Time: t0.Add(3 * time.Second), Message: "b3"}, t0)
	want = ConditionState{Type: "Disk", Problem: true, Reason: "B", Message: "b3; see runbook", Since: t0.Add(3 * time.Second)}
	if got := m.Conditions()[0]; got != want {
		t.Errorf("after b3: got %v, want %v", got, want)
	}
}

// TestMultiLinePatterns: a pattern spanning lines matches once its last
// line arrives, only within bufferSize lines, and its message is the lines
// it spans.
func TestMultiLinePatterns(t *testing.T) {
	cfg := func(buffer int) string {
		return fmt.Sprintf(`{"plugin": "kmsg", "bufferSize": %d, "rules": [{"type": "temporary", "reason": "Oops", "pattern": "BUG: oops\\nCPU: \\d+ PID: \\d+.*"}]}`, buffer)
	}
	tests := []struct {
		name   string
		buffer int
		lines  []string
		want   []probes.Event
	}{
		{"two lines", 3, []string{"noise", "BUG: oops", "CPU: 3 PID: 77 Comm: x"}, []probes.Event{{Reason: "Oops", Message: "BUG: oops\nCPU: 3 PID: 77 Comm: x"}}},
		{"first line alone", 3, []string{"BUG: oops"}, nil},
		{"a line between", 3, []string{"BUG: oops", "noise", "CPU: 3 PID: 77"}, nil},
		{"buffer of one line cannot span two", 1, []string{"BUG: oops", "CPU: 3 PID: 77"}, nil},
		{"match starting inside the older line spans it", 3, []string{"xBUG: oops", "CPU: 3 PID: 77"}, []probes.Event{{Reason: "Oops", Message: "xBUG: oops\nCPU: 3 PID: 77"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMatcher(mustParse(t, cfg(tt.buffer)), t0)
			for _, l := range tt.lines {
				m.Push(Line{Time: t0, Message: l}, t0)
			}
			if got := m.TakeEvents(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSpannedIsNPDs: the lines a match spans, counted as NPD's
// logBuffer.Match counts them.
func TestSpannedIsNPDs(t *testing.T) {
	buf := []Line{{Message: "aaa"}, {Message: "bb"}, {Message: "c"}} // "aaa\nbb\nc", 8 bytes
	tests := []struct {
		start int
		want  int // lines, from the newest
	}{
		{7, 1}, // "c"
		{6, 1}, // "\nc": NPD does not count the newline's line
		{5, 2}, // "b\nc"
		{4, 2}, // "bb\nc"
		{3, 2}, // "\nbb\nc"
		{2, 3},
		{0, 3},
	}
	for _, tt := range tests {
		if got := spanned(buf, 8, tt.start); len(got) != tt.want {
			t.Errorf("match at %d: got %d lines, want %d", tt.start, len(got), tt.want)
		}
	}
}

// TestLinesNotMatched: lines before the start time, empty lines and lines
// of the skip list are neither matched nor buffered.
func TestLinesNotMatched(t *testing.T) {
	m := NewMatcher(mustParse(t, `{"plugin": "kmsg", "skipList": [" audit:"], "rules": [{"type": "temporary", "reason": "R", "pattern": "a\\nb"}]}`), t0)
	for _, l := range []Line{
		{Time: t0.Add(-time.Second), Message: "bad"},
		{Time: t0, Message: "a"},
		{Time: t0, Message: "  "},
		{Time: t0, Message: "kernel: audit: b"},
		{Time: t0.Add(-time.Second), Message: "b"},
	} {
		if m.Push(l, t0) {
			t.Errorf("line %+v matched", l)
		}
	}
	if !m.Push(Line{Time: t0, Message: "b"}, t0) {
		t.Errorf("a then b (the others skipped) did not match")
	}
}

// TestEventsEveryMatch: a temporary rule's every match is accounted for, a
// flood included: the matcher keeps a burst of each reason's Events
// (maxPending, as many as the agent records at once) and counts the rest
// on the last kept (probes.Event.HeldBack), so a flood between two takes
// costs no memory; the agent paces them, and counts what it holds back.
// The reported position moves to the last line counted.
func TestEventsEveryMatch(t *testing.T) {
	const flood = 10000
	m := NewMatcher(mustParse(t, `{"plugin": "kmsg", "rules": [{"type": "temporary", "reason": "A", "pattern": "a"}, {"type": "temporary", "reason": "B", "pattern": "b"}]}`), t0)
	for i := range flood {
		m.Push(Line{Time: t0.Add(time.Duration(i) * time.Millisecond), Message: "a"}, t0)
		if i == 2 {
			m.Push(Line{Time: t0.Add(time.Duration(i) * time.Millisecond), Message: "b"}, t0)
		}
	}
	last := m.last
	if got := len(m.events); got > 2*maxPending {
		t.Errorf("%d matches of two reasons: %d Events kept, want at most %d", flood+1, got, 2*maxPending)
	}
	count := func() (events, lines map[string]int) {
		events, lines = map[string]int{}, map[string]int{}
		for _, e := range m.TakeEvents() {
			events[e.Reason]++
			lines[e.Reason] += 1 + e.HeldBack
		}
		return events, lines
	}
	events, lines := count()
	if want := map[string]int{"A": flood, "B": 1}; !reflect.DeepEqual(lines, want) {
		t.Errorf("flood: Events and their HeldBack counts stand for %v lines, want %v", lines, want)
	}
	if want := map[string]int{"A": maxPending, "B": 1}; !reflect.DeepEqual(events, want) {
		t.Errorf("flood: got %v Events, want %v", events, want)
	}
	if got := m.Reported(); got != last {
		t.Errorf("reported through %+v, want the last line counted, %+v", got, last)
	}
	if events, _ := count(); len(events) != 0 {
		t.Errorf("taken again: got %v, want none", events)
	}
}
