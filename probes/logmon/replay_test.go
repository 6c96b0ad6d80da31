package logmon

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

func TestPositionCovers(t *testing.T) {
	at := func(seq uint64, sec, n int) Position {
		return Position{Seq: seq, Time: t0.Add(time.Duration(sec) * time.Second), N: n}
	}
	cur := func(p Position, c string) Position { p.Cursor = c; return p }
	file := func(p Position, id string, off int64) Position { p.File, p.Off = id, off; return p }
	tests := []struct {
		name string
		p, l Position
		want bool
	}{
		{"zero covers nothing", Position{}, at(0, -100, 1), false},
		{"kmsg: an earlier sequence number", at(10, 5, 1), at(9, 9, 1), true},
		{"kmsg: the same one", at(10, 5, 1), at(10, 5, 1), true},
		{"kmsg: a later one, whatever its time", at(10, 5, 1), at(11, 1, 1), false},
		{"kmsg's first record (seq 0): by time", at(10, 5, 1), at(0, 0, 1), true},
		{"by time: earlier", at(0, 5, 2), at(0, 4, 9), true},
		{"by time: later", at(0, 5, 2), at(0, 6, 1), false},
		{"same time: an earlier place", at(0, 5, 2), at(0, 5, 1), true},
		{"same time: the same place", at(0, 5, 2), at(0, 5, 2), true},
		{"same time: a later place", at(0, 5, 2), at(0, 5, 3), false},
		// A journal entry by its cursor's sequence number, whatever its
		// time (a clock stepped between the two runs).
		{"journal: an earlier entry, later by the clock", cur(at(0, 5, 1), "s=ab;i=1f;b=x"), cur(at(0, 9, 1), "s=ab;i=1e;b=x"), true},
		{"journal: the same entry", cur(at(0, 5, 1), "s=ab;i=1f"), cur(at(0, 5, 1), "s=ab;i=1f"), true},
		{"journal: a later entry, earlier by the clock", cur(at(0, 5, 1), "s=ab;i=1f"), cur(at(0, -3600, 1), "s=ab;i=20"), false},
		{"journal: another writer's sequence: by time", cur(at(0, 5, 1), "s=ab;i=1f"), cur(at(0, 4, 1), "s=cd;i=99"), true},
		{"journal: not a cursor: by time", cur(at(0, 5, 1), "garbage"), cur(at(0, 6, 1), "s=ab;i=1"), false},
		// A filelog line by its file and offset.
		{"file: an earlier line, later by the clock", file(at(0, 5, 1), "1:2", 100), file(at(0, 9, 1), "1:2", 50), false},
		{"file: an earlier line", file(at(0, 5, 1), "1:2", 100), file(at(0, 4, 1), "1:2", 50), true},
		{"file: the same line", file(at(0, 5, 1), "1:2", 100), file(at(0, 5, 1), "1:2", 100), true},
		{"file: a later line, earlier by the clock", file(at(0, 5, 1), "1:2", 100), file(at(0, -3600, 1), "1:2", 150), false},
		{"file: another file: by time", file(at(0, 5, 1), "1:2", 100), file(at(0, 4, 1), "1:3", 150), true},
		{"file: a state kept before offsets: by time", at(0, 5, 1), file(at(0, 4, 1), "1:2", 150), true},
	}
	for _, tt := range tests {
		if got := tt.p.Covers(tt.l); got != tt.want {
			t.Errorf("%s: %+v covers %+v: got %v, want %v", tt.name, tt.p, tt.l, got, tt.want)
		}
	}
}

// TestEventsNotReplayed: a matcher restarted in the same boot with the
// position whose Events were reported records no Event again for the
// lines it covers (without spending the rate limit on them), and records
// those after it; set after the lines were pushed (another probe of the
// file started the source first), it still holds them back at TakeEvents.
// Lines without sequence numbers (filelog) are placed by time and their
// place among lines of the same time.
func TestEventsNotReplayed(t *testing.T) {
	cfg := mustParse(t, `{"plugin": "kmsg", "rules": [{"type": "temporary", "reason": "A", "pattern": "a.*"}, {"type": "temporary", "reason": "B", "pattern": "a b"}]}`)
	kmsg := func(seq int, msg string) Line {
		return Line{Seq: uint64(seq), Time: t0.Add(time.Duration(seq) * time.Second), Message: msg}
	}
	file := func(sec int, msg string) Line {
		return Line{Time: t0.Add(time.Duration(sec) * time.Second), Message: msg}
	}
	var lines []Line
	for i := 1; i <= 6; i++ {
		lines = append(lines, kmsg(i, "a "+string(rune('0'+i))))
	}
	// Six lines in one second, as a syslog file writes them.
	var flines []Line
	for i := 1; i <= 6; i++ {
		flines = append(flines, file(1, "a "+string(rune('0'+i))))
	}
	reasons := func(evs []probes.Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Reason+":"+e.Message)
		}
		return out
	}
	tests := []struct {
		name   string
		lines  []Line
		before int  // lines pushed and their Events taken before the restart
		late   bool // the position is set after the lines were pushed again
		want   []string
	}{
		{"kmsg", lines, 3, false, []string{"A:a 4", "A:a 5"}},
		{"kmsg, set late", lines, 3, true, []string{"A:a 4", "A:a 5"}},
		{"filelog, same second", flines, 3, false, []string{"A:a 4", "A:a 5"}},
		{"filelog, set late", flines, 3, true, []string{"A:a 4", "A:a 5"}},
		{"nothing reported", lines, 0, false, []string{"A:a 1", "A:a 2", "A:a 3", "A:a 4", "A:a 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m1 := NewMatcher(cfg, t0)
			for _, l := range tt.lines[:tt.before] {
				m1.Push(l, t0)
			}
			m1.TakeEvents()
			saved := m1.Reported()

			m2 := NewMatcher(cfg, t0)
			if !tt.late {
				m2.SetReported(saved)
			}
			for _, l := range tt.lines[:5] {
				m2.Push(l, t0)
			}
			if tt.late {
				m2.SetReported(saved)
			}
			// The burst is 5: had the replayed lines spent it, "a 4" and
			// "a 5" would be dropped when the position came first.
			if got := reasons(m2.TakeEvents()); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("after the restart: got %v, want %v", got, tt.want)
			}
			if got, want := m2.Reported(), m2.last; tt.before < 5 && !reflect.DeepEqual(got, want) {
				t.Errorf("reported %+v, want the last line's %+v", got, want)
			}
		})
	}

	// Two rules matching one line: both Events, and the position moves
	// once.
	m := NewMatcher(cfg, t0)
	m.Push(kmsg(1, "a b"), t0)
	if got, want := reasons(m.TakeEvents()), []string{"A:a b", "B:a b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("two rules on one line: got %v, want %v", got, want)
	}
	// A Note (overrun, rotation) is not a line's: always taken, the
	// position unmoved.
	m.Note(ReasonKernelLogOverrun, "lost", t0)
	if got := reasons(m.TakeEvents()); len(got) != 1 || m.Reported().Seq != 1 {
		t.Errorf("a note: got %v, reported %+v; want the note, reported at seq 1", got, m.Reported())
	}
}

// TestMonitorEventsNotReplayedAfterRestart: the probe carrying the Events
// keeps, with the boot id, the last line whose Events it reported; an agent
// restarted in the same boot reads the OOM line again (within lookback) and
// records no second OOMKilling Event, then records a new one; after a
// reboot the same sequence number is a new line and its Event is recorded.
func TestMonitorEventsNotReplayedAfterRestart(t *testing.T) {
	const oom = "Out of memory: Killed process 4242 (stress) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	const oom2 = "Out of memory: Killed process 4343 (later) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	path := fifo(t)
	mon := newMonitor(t, "kernel-monitor.json", fixtureHost(t, "boot-1"), path)
	p := byCondition(mon.Probes())["KernelDeadlock"] // carries the Events
	if p.State() != nil {
		t.Errorf("State before any line: %s, want nil", p.State())
	}
	watch(t, p)
	writeKmsg(t, path, rec(1, time.Minute, oom))
	var got []probes.Event
	waitFor(t, p, "the OOMKilling Event", func(r probes.Result) bool { got = append(got, r.Events...); return len(got) > 0 })
	state := p.State()
	var h heldState
	if err := json.Unmarshal(state, &h); err != nil || h.BootID != "boot-1" || h.Cond != nil || h.EventsThrough == nil || h.EventsThrough.Seq != 1 {
		t.Fatalf("State %s (%v): want boot-1, no condition, Events through seq 1", state, err)
	}

	for _, tt := range []struct {
		boot string
		want []string
	}{
		{"boot-1", []string{oom2}},
		{"boot-2", []string{oom, oom2}},
	} {
		t.Run(tt.boot, func(t *testing.T) {
			path := fifo(t)
			mon := newMonitor(t, "kernel-monitor.json", fixtureHost(t, tt.boot), path)
			p := byCondition(mon.Probes())["KernelDeadlock"]
			if err := p.Restore(state); err != nil {
				t.Fatal(err)
			}
			watch(t, p)
			writeKmsg(t, path, rec(1, time.Minute, oom), rec(2, 0, oom2))
			var msgs []string
			waitFor(t, p, "the lines read", func(r probes.Result) bool {
				for _, e := range r.Events {
					msgs = append(msgs, e.Message)
				}
				return r.Readings[1].Value == "2"
			})
			for _, e := range p.Probe(context.Background()).Events {
				msgs = append(msgs, e.Message)
			}
			if !reflect.DeepEqual(msgs, tt.want) {
				t.Errorf("Events after the restart: got %q, want %q", msgs, tt.want)
			}
		})
	}
}
