package logmon

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// Line is one log record as a source delivers it.
type Line struct {
	// Time is when the kernel or the writer logged it.
	Time time.Time
	// Message is the record's text, without the kmsg prefix or the
	// filelog timestamp.
	Message string
	// Seq is the kmsg sequence number; 0 for other sources.
	Seq uint64
	// Cursor is a journald entry's cursor; "" for other sources.
	Cursor string
	// File and Offset place a filelog line: its file's device and inode
	// ("dev:ino") and the byte after it; "" and 0 for other sources.
	File   string
	Offset int64
	// Live: the line was read after the source reached the end of what
	// its log held when it was first opened (filelog, journald), so it was
	// logged after reading started whatever its time says (a wall clock
	// stepped back): see Matcher.MatchLive.
	Live bool
}

// Position is where a line stands in its log, to tell after a restart
// which lines' Events were reported already, whatever the wall clock did
// meanwhile where the log says more than the time. A kmsg line is placed
// by its sequence number; a journald entry by its cursor (its writer's
// sequence number); a filelog line by its file (device and inode) and the
// byte after it. Otherwise (another journal writer, another file, a state
// kept before these were) a line is placed by its time and, among
// consecutive lines of the same time, its place N (1 for the first), which
// is the same when the log is read again from its start.
type Position struct {
	Seq    uint64    `json:"seq,omitempty"`
	Time   time.Time `json:"time"`
	N      int       `json:"n,omitempty"`
	Cursor string    `json:"cursor,omitempty"`
	File   string    `json:"file,omitempty"`
	Off    int64     `json:"off,omitempty"`
}

// Covers reports whether the line at l is at or before p. The zero
// Position covers nothing. In the same file, a line at or before p's
// offset is covered unless it is later than p (the file was truncated and
// written again).
func (p Position) Covers(l Position) bool {
	if p.Time.IsZero() {
		return false
	}
	if p.Seq != 0 && l.Seq != 0 {
		return l.Seq <= p.Seq
	}
	if c, ok := compareCursors(l.Cursor, p.Cursor); ok {
		return c <= 0
	}
	if p.File != "" && p.File == l.File {
		return l.Off <= p.Off && !l.Time.After(p.Time)
	}
	if l.Time.Before(p.Time) {
		return true
	}
	return l.Time.Equal(p.Time) && l.N <= p.N
}

// compareCursors compares two journal cursors by their writer's sequence
// number ("s=<seqnum id>;i=<seqnum, hex>;b=...", as sd_journal_get_cursor
// writes them): -1, 0 or 1 as a is before, at or after b; ok is false when
// either is not a cursor or they are of different writers' sequences.
func compareCursors(a, b string) (int, bool) {
	ida, sa, oka := cursorSeq(a)
	idb, sb, okb := cursorSeq(b)
	if !oka || !okb || ida != idb {
		return 0, false
	}
	switch {
	case sa < sb:
		return -1, true
	case sa > sb:
		return 1, true
	}
	return 0, true
}

// cursorSeq is a journal cursor's sequence number id and sequence number.
func cursorSeq(c string) (string, uint64, bool) {
	var id string
	var seq uint64
	var haveSeq bool
	for _, kv := range strings.Split(c, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "s":
			id = v
		case "i":
			n, err := strconv.ParseUint(v, 16, 64)
			seq, haveSeq = n, err == nil
		}
	}
	return id, seq, id != "" && haveSeq
}

// ConditionState is where one of the file's conditions stands.
type ConditionState struct {
	Type string
	// Problem is true once a permanent rule of the condition matched;
	// like NPD, nothing but a new boot (or a restart past lookback)
	// clears it.
	Problem bool
	// Reason and Message are the default ones while healthy, the
	// matching rule's reason and the matched lines otherwise.
	Reason, Message string
	// Since is when it last changed: the first matched line's time, or
	// when matching started.
	Since time.Time
}

// Match is one rule that matched, for humans (selftaint check).
type Match struct {
	Reason string
	// Permanent says the rule sets Condition; a temporary rule's match
	// is an Event.
	Permanent bool
	Condition string
	Lines     []Line
	// Reported: a temporary rule's Event reported before a restart (see
	// Matcher.SetReported), not recorded again.
	Reported bool
}

// Matcher applies a config's rules to lines as NPD's log monitor does: a
// buffer of BufferSize lines joined by '\n', each rule's pattern anchored to
// the end of the buffer, the lines the match spans making the message. It
// is pure: no clock, no goroutines, not safe for concurrent use.
type Matcher struct {
	cfg   *Config
	since time.Time // lines before it are not matched
	live  bool      // but Live lines are (MatchLive)
	buf   []Line    // the last BufferSize lines, oldest first
	conds []ConditionState
	// events are the Events not yet taken: the agent paces them
	// (agent/events.go); beyond maxPending of a reason they are counted.
	events []pendingEvent
	recent []Match // the last recentMatches matches, oldest first
	// reported is the last line whose Events were taken (or restored,
	// SetReported): a temporary rule matching a line it covers records no
	// Event again.
	reported Position
	// last is the last line pushed, with its place among lines of its
	// time.
	last Position
}

// pendingEvent is an Event not yet taken, with the line that made it (the
// zero Position for the monitor's own Notes, always reported).
type pendingEvent struct {
	ev probes.Event
	at Position
	// through is the last line of the Events of its reason counted on it
	// (ev.HeldBack); zero when none or all were Notes.
	through Position
}

// maxPending is how many Events of one reason the matcher keeps until they
// are taken: as many as the agent's pacing records of one reason at once
// (agent.ReasonBurst). More are counted on the last one kept
// (probes.Event.HeldBack), so a flood of matched lines between two probe
// runs costs no memory.
const maxPending = 5

// queue adds e, made by the line at (zero for a Note), unless maxPending
// Events of its reason are waiting: then it is counted on the last.
func (m *Matcher) queue(e probes.Event, at Position) {
	n, last := 0, -1
	for i := range m.events {
		if m.events[i].ev.Reason == e.Reason {
			n, last = n+1, i
		}
	}
	if n < maxPending {
		m.events = append(m.events, pendingEvent{ev: e, at: at})
		return
	}
	p := &m.events[last]
	p.ev.HeldBack++
	if !at.Time.IsZero() {
		p.through = at
	}
}

// recentMatches is how many matches a Matcher keeps for humans.
const recentMatches = 10

// StartTime is NPD's util.GetStartTime: lines logged before it are not
// matched. It is the later of boot+delay and now-lookback (now, when
// lookback is 0).
func StartTime(now, boot time.Time, lookback, delay time.Duration) time.Time {
	start := boot.Add(delay)
	if from := now.Add(-lookback); start.Before(from) {
		start = from
	}
	return start
}

// NewMatcher starts matching cfg's rules on lines logged at or after since,
// every condition at its default (healthy) state since then.
func NewMatcher(cfg *Config, since time.Time) *Matcher {
	m := &Matcher{cfg: cfg, since: since}
	for _, c := range cfg.Conditions {
		m.conds = append(m.conds, ConditionState{Type: c.Type, Reason: c.Reason, Message: c.Message, Since: since})
	}
	return m
}

// Push matches one line. It reports whether a rule matched. A line before
// since, an empty one or one containing an entry of the skip list is not
// matched (and not buffered), as NPD's watchers drop them. The time
// argument is unused: the agent paces Events (agent/events.go).
func (m *Matcher) Push(l Line, _ time.Time) bool {
	n := 1
	if m.last.Time.Equal(l.Time) {
		n = m.last.N + 1
	}
	m.last = Position{Seq: l.Seq, Time: l.Time, N: n, Cursor: l.Cursor, File: l.File, Off: l.Offset}
	l.Message = strings.TrimSpace(l.Message)
	if l.Message == "" || m.Old(l) || m.skipped(l.Message) {
		return false
	}
	if len(m.buf) == m.cfg.BufferSize {
		m.buf = append(m.buf[:0], m.buf[1:]...)
	}
	m.buf = append(m.buf, l)
	joined := joinMessages(m.buf)
	matched := false
	for _, r := range m.cfg.Rules {
		if r.match == nil {
			continue
		}
		loc := r.match.FindStringIndex(joined)
		if loc == nil {
			continue
		}
		matched = true
		lines := spanned(m.buf, len(joined), loc[0])
		m.apply(r, lines)
	}
	return matched
}

// MatchLive makes Live lines count whatever their time: the start time
// came from lookback alone (delay was over), and a Live line was logged
// after it, even when the wall clock was stepped back since.
func (m *Matcher) MatchLive() { m.live = true }

// Old reports whether l was logged before the start time: not matched.
func (m *Matcher) Old(l Line) bool {
	return l.Time.Before(m.since) && !(m.live && l.Live)
}

func (m *Matcher) skipped(msg string) bool {
	for _, s := range m.cfg.SkipList {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func joinMessages(buf []Line) string {
	msgs := make([]string, len(buf))
	for i, l := range buf {
		msgs[i] = l.Message
	}
	return strings.Join(msgs, "\n")
}

// spanned returns the buffered lines a match starting at byte start of the
// joined buffer (total bytes long) spans, oldest first, counted back from
// the newest line exactly as NPD's logBuffer.Match counts them.
func spanned(buf []Line, total, start int) []Line {
	s := total - start - 1
	n, sum := 0, 0
	for i := len(buf) - 1; i >= 0; i-- {
		n++
		sum += len(buf[i].Message) + 1
		if sum > s {
			break
		}
	}
	return append([]Line(nil), buf[len(buf)-n:]...)
}

// message is NPD's generateMessage: the lines joined by '\n', then "; "
// and the rule's suffix when it has one.
func message(lines []Line, suffix string) string {
	msg := joinMessages(lines)
	if suffix != "" {
		msg += "; " + suffix
	}
	return msg
}

// apply records what rule r matching lines means.
func (m *Matcher) apply(r Rule, lines []Line) {
	msg := message(lines, r.Suffix)
	match := Match{Reason: r.Reason, Permanent: r.Permanent, Lines: lines}
	if r.Permanent {
		match.Condition = r.Condition
	}
	if r.Permanent {
		for i := range m.conds {
			c := &m.conds[i]
			if c.Type != r.Condition {
				continue
			}
			if !c.Problem || c.Reason != r.Reason {
				c.Since = lines[0].Time
				c.Message = msg
			}
			c.Problem, c.Reason = true, r.Reason
			break
		}
	} else if m.reported.Covers(m.last) {
		match.Reported = true
	} else {
		m.queue(probes.Event{Reason: r.Reason, Message: msg}, m.last)
	}
	m.recent = append(m.recent, match)
	if len(m.recent) > recentMatches {
		m.recent = m.recent[len(m.recent)-recentMatches:]
	}
}

// Note records an Event of the monitor's own (an overrun, a rotation); the
// agent paces it with the rules' Events. now is unused.
func (m *Matcher) Note(reason, msg string, _ time.Time) {
	m.queue(probes.Event{Reason: reason, Message: msg}, Position{})
}

// Conditions returns every condition's state, in file order.
func (m *Matcher) Conditions() []ConditionState {
	return append([]ConditionState(nil), m.conds...)
}

// TakeEvents returns the Events recorded since the last call, but those of
// lines Reported covers (a position restored after they were recorded),
// and moves Reported to the last line whose Event it returns or counts
// (probes.Event.HeldBack).
func (m *Matcher) TakeEvents() []probes.Event {
	var out []probes.Event
	before := m.reported
	for _, e := range m.events {
		if !e.at.Time.IsZero() && before.Covers(e.at) {
			continue
		}
		out = append(out, e.ev)
		for _, at := range []Position{e.at, e.through} {
			if !at.Time.IsZero() && !m.reported.Covers(at) {
				m.reported = at
			}
		}
	}
	m.events = nil
	return out
}

// Reported is the last line whose Events were taken or restored; the zero
// Position when none.
func (m *Matcher) Reported() Position { return m.reported }

// SetReported says the Events of the lines p covers were reported before
// (by the agent before it restarted, in the same boot): their rules record
// no Event again. It never moves Reported back.
func (m *Matcher) SetReported(p Position) {
	if !m.reported.Covers(p) {
		m.reported = p
	}
}

// Recent returns the last matches, oldest first.
func (m *Matcher) Recent() []Match {
	return append([]Match(nil), m.recent...)
}

// String says where the matcher stands, for logs.
func (c ConditionState) String() string {
	return fmt.Sprintf("%s=%v (%s: %s)", c.Type, c.Problem, c.Reason, c.Message)
}

// Hold sets a condition to a problem held before a restart (c, as
// Conditions returned it then), unless it already holds one. It reports
// whether the condition is one of the file's.
func (m *Matcher) Hold(c ConditionState) bool {
	for i := range m.conds {
		if m.conds[i].Type != c.Type {
			continue
		}
		if !m.conds[i].Problem && c.Problem {
			m.conds[i] = c
		}
		return true
	}
	return false
}

// Reset puts a condition back to its default (healthy) state as of now; it
// reports whether it held a problem.
func (m *Matcher) Reset(condType string, now time.Time) bool {
	for i, c := range m.cfg.Conditions {
		if c.Type != condType || !m.conds[i].Problem {
			continue
		}
		m.conds[i] = ConditionState{Type: c.Type, Reason: c.Reason, Message: c.Message, Since: now}
		return true
	}
	return false
}
