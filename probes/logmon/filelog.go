package logmon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// The filelog source follows a log file as NPD's filelog watcher does
// (every line from the start of the file, then what is appended), and
// also notices what NPD's does not: the file replaced under its name
// (rotation: the rest of the old file is read first, then the new one
// from its start) and the file cut shorter than what was read
// (truncation: reading starts over from its start).

// Reasons of the filelog source's own Events.
const (
	ReasonLogRotated   = "LogRotated"
	ReasonLogTruncated = "LogTruncated"
)

// Parse is NPD's filelog translator: the timestamp and message are the
// last submatches of their patterns; a timestamp without a year (syslog's)
// is taken in now's year. loc is the time zone of timestamps without one.
func (f *LineFormat) Parse(text string, now time.Time, loc *time.Location) (Line, error) {
	ts := f.Timestamp.FindStringSubmatch(text)
	msg := f.Message.FindStringSubmatch(text)
	if len(ts) == 0 || len(msg) == 0 {
		return Line{}, fmt.Errorf("line %q: no timestamp or message", text)
	}
	t, err := time.ParseInLocation(f.TimestampFormat, ts[len(ts)-1], loc)
	if err != nil {
		return Line{}, fmt.Errorf("line %q: %w", text, err)
	}
	if t.Year() == 0 {
		t = t.AddDate(now.Year(), 0, 0)
	}
	return Line{Time: t, Message: msg[len(msg)-1]}, nil
}

// filelogFollower is one followed file: what is open and how far it was
// read. It outlives a failed read: opened again, it goes on at the offset
// read in the same file (its device and inode), or from the start of
// another one.
type filelogFollower struct {
	path     string
	f        *os.File    // nil while closed
	info     os.FileInfo // the file last opened; nil before the first
	id       string      // info's device and inode, "dev:ino"
	offset   int64       // bytes of it read
	partial  []byte
	skipping bool // dropping the rest of a line longer than maxLine
	// startID and startSize are the file first opened and its size then:
	// what follows was logged after reading started.
	startID   string
	startSize int64
	started   bool
	line      func(text string, at filePlace)
	note      func(reason, msg string)
	bad       func(string)
}

// filePlace is where a filelog line is: its file ("dev:ino"), the byte
// after it, and whether it was written after reading started (Line.Live).
type filePlace struct {
	file string
	end  int64
	live bool
}

// maxLine is the longest filelog line kept; the rest of a longer one is
// skipped.
const maxLine = 64 << 10

// ReadFilelog follows the file at path until ctx ends, calling line for
// each line (without its newline) and note for a rotation or truncation;
// it looks for more every poll. It fails when the file cannot be opened
// at the start or read; a file missing after a rotation is waited for.
func ReadFilelog(ctx context.Context, path string, poll time.Duration, line func(string), note func(reason, msg string)) error {
	fl := &filelogFollower{path: path, line: func(text string, _ filePlace) { line(text) }, note: note, bad: func(string) {}}
	return fl.run(ctx, poll, func() {})
}

// run opens the file (again) and follows it until ctx ends or reading
// fails, calling opened once it is open.
func (fl *filelogFollower) run(ctx context.Context, poll time.Duration, opened func()) error {
	if err := fl.open(); err != nil {
		return err
	}
	opened()
	defer fl.close()
	for ctx.Err() == nil {
		n, err := fl.drain()
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if err := fl.check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		}
	}
	return nil
}

// open opens the file at path: at the offset read when it is the file
// read before, from its start when it is another (said as a rotation).
func (fl *filelogFollower) open() error {
	f, err := os.Open(fl.path)
	if err != nil {
		return fmt.Errorf("opening the log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("looking at the log: %w", err)
	}
	switch {
	case fl.info != nil && os.SameFile(fl.info, st):
		if _, err := f.Seek(fl.offset, io.SeekStart); err != nil {
			_ = f.Close()
			return fmt.Errorf("seeking the log to byte %d read before: %w", fl.offset, err)
		}
	case fl.info != nil:
		fl.note(ReasonLogRotated, fmt.Sprintf("%s was replaced while it could not be read, after %d bytes of the old file were read: reading the new file from its start", fl.path, fl.offset))
		fallthrough
	default:
		fl.offset, fl.partial, fl.skipping = 0, nil, false
	}
	fl.f, fl.info, fl.id = f, st, fileID(st)
	if !fl.started {
		fl.started, fl.startID, fl.startSize = true, fl.id, st.Size()
	}
	return nil
}

// close closes the open file.
func (fl *filelogFollower) close() {
	if fl.f != nil {
		_ = fl.f.Close()
		fl.f = nil
	}
}

// fileID is a file's device and inode, "dev:ino"; "" where unknown.
func fileID(st os.FileInfo) string {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", s.Dev, s.Ino)
	}
	return ""
}

// drain reads what is there, calling line for each whole line.
func (fl *filelogFollower) drain() (int, error) {
	buf := make([]byte, 32<<10)
	total := 0
	for {
		n, err := fl.f.Read(buf)
		total += n
		fl.offset += int64(n)
		fl.lines(buf[:n])
		switch {
		case errors.Is(err, io.EOF) || (err == nil && n == 0):
			return total, nil
		case err != nil:
			return total, fmt.Errorf("reading the log: %w", err)
		}
	}
}

// lines hands on each whole line of what was read, data, after what was
// left unfinished; the rest of a line longer than maxLine is skipped.
func (fl *filelogFollower) lines(data []byte) {
	fl.partial = append(fl.partial, data...)
	for {
		i := bytes.IndexByte(fl.partial, '\n')
		if i < 0 {
			if len(fl.partial) > maxLine {
				if !fl.skipping {
					fl.bad(fmt.Sprintf("line %s: longer than %d bytes", quote(string(fl.partial)), maxLine))
				}
				fl.partial, fl.skipping = fl.partial[:0], true
			}
			return
		}
		text := string(fl.partial[:i])
		fl.partial = fl.partial[i+1:]
		switch {
		case fl.skipping:
			fl.skipping = false
		case len(text) > maxLine:
			fl.bad(fmt.Sprintf("line %s: longer than %d bytes", quote(text), maxLine))
		default:
			fl.line(text, fl.place(fl.offset-int64(len(fl.partial))))
		}
	}
}

// check looks for a rotation or truncation at the end of what was read.
func (fl *filelogFollower) check() error {
	st, err := os.Stat(fl.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // rotated, the new file not there yet
	}
	if err != nil {
		return fmt.Errorf("looking at the log: %w", err)
	}
	cur, err := fl.f.Stat()
	if err != nil {
		return fmt.Errorf("looking at the open log: %w", err)
	}
	switch {
	case !os.SameFile(st, cur):
		if _, err := fl.drain(); err != nil { // the old file's last lines
			return err
		}
		fl.flush()
		nf, err := os.Open(fl.path)
		if err != nil {
			return nil // gone again: try at the next poll
		}
		st, err := nf.Stat()
		if err != nil {
			_ = nf.Close()
			return nil // try at the next poll
		}
		_ = fl.f.Close()
		read := fl.offset
		fl.f, fl.info, fl.id, fl.offset, fl.skipping = nf, st, fileID(st), 0, false
		fl.note(ReasonLogRotated, fmt.Sprintf("%s was rotated after %d bytes were read: reading the new file from its start", fl.path, read))
	case st.Size() < fl.offset:
		if _, err := fl.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewinding the truncated log: %w", err)
		}
		fl.note(ReasonLogTruncated, fmt.Sprintf("%s was truncated to %d bytes after %d were read: reading it again from its start", fl.path, st.Size(), fl.offset))
		fl.offset, fl.partial, fl.skipping = 0, nil, false
		fl.startID = "" // written again after reading started
	}
	return nil
}

// place is where the line ending at byte end of the open file is.
func (fl *filelogFollower) place(end int64) filePlace {
	return filePlace{file: fl.id, end: end, live: fl.id != fl.startID || end > fl.startSize}
}

// flush hands on an unfinished last line.
func (fl *filelogFollower) flush() {
	if len(fl.partial) > 0 && !fl.skipping {
		fl.line(string(fl.partial), fl.place(fl.offset))
	}
	fl.partial, fl.skipping = nil, false
}
