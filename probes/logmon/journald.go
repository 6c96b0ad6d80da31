package logmon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/sdjournal"

	"github.com/selftaint/selftaint/probes"
)

// The journald source reads the systemd journal as NPD's journald watcher
// does: the journal files in the directory logPath (sd_journal_open_directory),
// the entries whose SYSLOG_IDENTIFIER is pluginConfig.source, from the start
// time (lookback, delay) on, each entry's MESSAGE at its realtime timestamp.
// It reads them with github.com/coreos/go-systemd/v22/sdjournal (what NPD
// uses), which loads libsystemd.so.0 with dlopen when the journal is first
// opened: the binary needs cgo but not libsystemd to link or start, and
// where the library is missing only the journald files' probes say so.
// Beyond NPD's watcher: an entry logged in another boot (its _BOOT_ID) is
// not matched, so a previous boot's problem does not come back with a
// clock that went backwards; a failed read closes the journal and opens it
// again after the last entry read, said as an Event, where NPD's watcher
// logs the error and tries the same read again at once, forever. libsystemd
// itself follows journald's rotation (a file renamed, a new one created)
// and vacuuming (a file deleted: what was mapped stays readable until
// libsystemd lets it go).

// Journal directories (journald's Storage=persistent and volatile).
const (
	// DefaultJournalPath is where journald keeps the journal persistently
	// and what NPD's journald files name as logPath.
	DefaultJournalPath = "/var/log/journal"
	// VolatileJournalPath is where journald keeps it when
	// DefaultJournalPath does not exist.
	VolatileJournalPath = "/run/log/journal"
	// LibsystemdName is the library sdjournal loads at run time.
	LibsystemdName = "libsystemd.so.0"
)

// How the journald source waits.
const (
	// journalWait bounds one wait for new entries: libsystemd wakes it at
	// once when the journal changes (inotify), so it only bounds how long
	// the source takes to stop.
	journalWait = time.Second
	// journalRetry is the pause before the journal is opened again after a
	// failed read.
	journalRetry = time.Second
)

// JournalDir is the directory a journald file's journal is read from
// under host: its logPath; without one, or where logPath is
// DefaultJournalPath and the host has none, the host's VolatileJournalPath
// if it exists (journald keeps the journal in /run when /var/log/journal
// does not exist, and every journald file NPD ships names
// /var/log/journal; NPD opens the local journal without a logPath, and
// fails to start with a logPath that does not exist).
func JournalDir(host probes.Host, logPath string) string {
	if logPath != "" && logPath != DefaultJournalPath {
		return host.Path(logPath)
	}
	persistent := host.Path(DefaultJournalPath)
	if _, err := os.Stat(persistent); err != nil {
		if _, err := os.Stat(host.Path(VolatileJournalPath)); err == nil {
			return host.Path(VolatileJournalPath)
		}
	}
	return persistent
}

// journal is what the source uses of an open journal (*sdjournal.Journal).
type journal interface {
	AddMatch(match string) error
	SeekRealtimeUsec(usec uint64) error
	SeekCursor(cursor string) error
	TestCursor(cursor string) error
	Next() (uint64, error)
	GetEntry() (*sdjournal.JournalEntry, error)
	Wait(timeout time.Duration) int
	Close() error
}

// openJournalDir opens the journal files in dir with libsystemd.
func openJournalDir(dir string) (journal, error) {
	j, err := sdjournal.NewJournalFromDir(dir)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// journalFollower reads one journal directory until its context ends.
type journalFollower struct {
	dir    string
	source string    // SYSLOG_IDENTIFIER
	bootID string    // the current boot, as the journal writes it ("" if unknown)
	since  time.Time // where reading starts when no entry was read yet
	wait   time.Duration
	retry  time.Duration
	open   func(dir string) (journal, error)
	line   func(Line)
	note   func(reason, msg string)
	bad    func(string) // an entry that is not a line (no MESSAGE)
	opened func()       // called when the journal opened

	cursor string // the last entry read; "" before the first
	// caughtUp: the end of the journal was reached once (Line.Live);
	// atomic, as tests look at it.
	caughtUp atomic.Bool
	read     uint64 // entries read
}

// run reads the journal until ctx ends. It fails when the journal cannot
// be opened at the start or again after a failed read; run again, it
// opens the journal after the last entry read.
func (f *journalFollower) run(ctx context.Context) error {
	j, err := f.openAt()
	if err != nil {
		return err
	}
	f.opened()
	for {
		err := f.follow(ctx, j)
		_ = j.Close()
		if ctx.Err() != nil {
			return nil
		}
		f.note(ReasonLogReadError, fmt.Sprintf("reading the journal %s failed after %d entries: %v; opening it again after the last entry read", f.dir, f.read, err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.retry):
		}
		if j, err = f.openAt(); err != nil {
			return fmt.Errorf("opening the journal again: %w", err)
		}
		f.opened()
	}
}

// openAt opens the journal with the source's match, placed after the last
// entry read, or at since before the first.
func (f *journalFollower) openAt() (journal, error) {
	if _, err := os.Stat(f.dir); err != nil {
		// sd_journal_open_directory opens a directory that does not exist
		// as an empty journal.
		return nil, fmt.Errorf("the journal directory: %w", err)
	}
	if err := journalReadable(f.dir); err != nil {
		return nil, err
	}
	j, err := f.open(f.dir)
	if err != nil {
		return nil, fmt.Errorf("opening the journal with %s (loaded at run time): %w", LibsystemdName, err)
	}
	if err := f.place(j); err != nil {
		_ = j.Close()
		return nil, err
	}
	return j, nil
}

// journalReadable fails when dir holds journal files (in it or in its
// machine-id subdirectories) and none of them can be opened: libsystemd
// then opens the journal as empty, without an error, and the probes would
// call healthy a node whose journal they cannot see. Journal files are
// mode 0640, group systemd-journal (and an ACL for adm).
func journalReadable(dir string) error {
	top, err := filepath.Glob(filepath.Join(dir, "*.journal"))
	if err != nil {
		return fmt.Errorf("listing the journal files: %w", err)
	}
	sub, err := filepath.Glob(filepath.Join(dir, "*", "*.journal"))
	if err != nil {
		return fmt.Errorf("listing the journal files: %w", err)
	}
	files := append(top, sub...)
	var first error
	for _, p := range files {
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_ = f.Close()
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("none of the %d journal files can be read (they are the systemd-journal group's; libsystemd would read an empty journal): %w", len(files), first)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("listing the journal files: %w", err)
	}
	return nil
}

// place adds the match and seeks.
func (f *journalFollower) place(j journal) error {
	m := sdjournal.Match{Field: sdjournal.SD_JOURNAL_FIELD_SYSLOG_IDENTIFIER, Value: f.source}
	if err := j.AddMatch(m.String()); err != nil {
		return fmt.Errorf("matching %s: %w", m.String(), err)
	}
	if f.cursor == "" {
		if err := j.SeekRealtimeUsec(uint64(max(f.since.UnixMicro(), 0))); err != nil {
			return fmt.Errorf("seeking the journal to %v: %w", f.since, err)
		}
		return nil
	}
	if err := j.SeekCursor(f.cursor); err != nil {
		return fmt.Errorf("seeking the journal to the last entry read: %w", err)
	}
	// Step onto the last entry read, so that the next Next is past it; if
	// that entry is gone (vacuumed), the entry stepped onto is unread.
	n, err := j.Next()
	if err != nil || n == 0 {
		return wrapIf(err, "reading the journal after the last entry read")
	}
	if err := j.TestCursor(f.cursor); errors.Is(err, sdjournal.ErrNoTestCursor) {
		f.entry(j)
	} else if err != nil {
		return fmt.Errorf("testing the journal's cursor: %w", err)
	}
	return nil
}

// follow reads entries, waiting for more at the end, until ctx ends or a
// read fails.
func (f *journalFollower) follow(ctx context.Context, j journal) error {
	for ctx.Err() == nil {
		n, err := j.Next()
		if err != nil {
			return fmt.Errorf("reading the next entry: %w", err)
		}
		if n == 0 {
			f.caughtUp.Store(true)
			if r := j.Wait(f.wait); r < 0 {
				return fmt.Errorf("waiting for the journal: %w", syscall.Errno(-r))
			}
			continue
		}
		f.entry(j)
	}
	return nil
}

// entry reads the entry stepped onto and hands on its line. An entry that
// cannot be read is skipped, and said: reading it again would fail again.
func (f *journalFollower) entry(j journal) {
	f.read++
	e, err := j.GetEntry()
	if err != nil {
		f.note(ReasonLogReadError, fmt.Sprintf("entry %d of the journal %s could not be read, skipped: %v", f.read, f.dir, err))
		f.bad(fmt.Sprintf("entry %d of the journal could not be read: %v", f.read, err))
		return
	}
	f.cursor = e.Cursor
	l, ok := journalLine(e, f.bootID)
	switch {
	case !ok:
	case l.Message == "":
		if _, has := e.Fields[sdjournal.SD_JOURNAL_FIELD_MESSAGE]; !has {
			f.bad(fmt.Sprintf("journal entry %s has no MESSAGE", quote(e.Cursor)))
		}
	default:
		l.Live = f.caughtUp.Load()
		f.line(l)
	}
}

// journalLine is an entry's Line, as NPD's watcher translates it (MESSAGE
// at the realtime timestamp); ok is false for an entry logged in a boot
// other than bootID (the journal's form, see journalBootID; "" matches
// every boot). An entry without _BOOT_ID counts as of this boot.
func journalLine(e *sdjournal.JournalEntry, bootID string) (Line, bool) {
	if b := e.Fields[sdjournal.SD_JOURNAL_FIELD_BOOT_ID]; bootID != "" && b != "" && journalBootID(b) != bootID {
		return Line{}, false
	}
	return Line{Time: time.UnixMicro(int64(e.RealtimeTimestamp)), Message: e.Fields[sdjournal.SD_JOURNAL_FIELD_MESSAGE], Cursor: e.Cursor}, true
}

// journalBootID is a boot id as the journal writes it (32 lower-case hex
// digits) from the kernel's form (/proc/sys/kernel/random/boot_id, a UUID
// with dashes).
func journalBootID(id string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(id)), "-", "")
}

// wrapIf wraps err with what was being done; nil stays nil.
func wrapIf(err error, what string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// readJournald follows the journal until ctx ends or it fails. The boot
// is known. Run again, it goes on after the last entry read (its cursor),
// from the start time computed at the first run before any.
func (mon *Monitor) readJournald(ctx context.Context) error {
	if mon.jf != nil {
		return mon.jf.run(ctx)
	}
	mon.mu.Lock()
	since, bootID := mon.m.since, mon.bootID
	mon.mu.Unlock()
	open := mon.openJournal
	if open == nil {
		open = openJournalDir
	}
	if now := mon.now(); now.Before(since) { // NPD's watcher seeks no later than now
		since = now
	}
	f := &journalFollower{dir: mon.path, source: mon.cfg.JournalSource, bootID: journalBootID(bootID), since: since,
		wait: journalWait, retry: min(mon.retry, journalRetry), open: open, line: mon.line, note: mon.note, bad: mon.bad, opened: mon.setOpened}
	mon.jf = f
	return f.run(ctx)
}
