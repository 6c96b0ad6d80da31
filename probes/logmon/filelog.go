package logmon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
// read.
type filelogFollower struct {
	path    string
	f       *os.File
	offset  int64
	partial []byte
	line    func(string)
	note    func(reason, msg string)
}

// ReadFilelog follows the file at path until ctx ends, calling line for
// each line (without its newline) and note for a rotation or truncation;
// it looks for more every poll. It fails only when the file cannot be
// opened at the start; a file missing after a rotation is waited for.
func ReadFilelog(ctx context.Context, path string, poll time.Duration, line func(string), note func(reason, msg string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the log: %w", err)
	}
	fl := &filelogFollower{path: path, f: f, line: line, note: note}
	defer func() { _ = fl.f.Close() }()
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

// drain reads what is there, calling line for each whole line.
func (fl *filelogFollower) drain() (int, error) {
	buf := make([]byte, 32<<10)
	total := 0
	for {
		n, err := fl.f.Read(buf)
		total += n
		fl.offset += int64(n)
		fl.partial = append(fl.partial, buf[:n]...)
		for {
			i := bytes.IndexByte(fl.partial, '\n')
			if i < 0 {
				break
			}
			fl.line(string(fl.partial[:i]))
			fl.partial = fl.partial[i+1:]
		}
		switch {
		case errors.Is(err, io.EOF) || (err == nil && n == 0):
			return total, nil
		case err != nil:
			return total, fmt.Errorf("reading the log: %w", err)
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
		_ = fl.f.Close()
		read := fl.offset
		fl.f, fl.offset = nf, 0
		fl.note(ReasonLogRotated, fmt.Sprintf("%s was rotated after %d bytes were read: reading the new file from its start", fl.path, read))
	case st.Size() < fl.offset:
		if _, err := fl.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewinding the truncated log: %w", err)
		}
		fl.note(ReasonLogTruncated, fmt.Sprintf("%s was truncated to %d bytes after %d were read: reading it again from its start", fl.path, st.Size(), fl.offset))
		fl.offset, fl.partial = 0, nil
	}
	return nil
}

// flush hands on an unfinished last line.
func (fl *filelogFollower) flush() {
	if len(fl.partial) > 0 {
		fl.line(string(fl.partial))
		fl.partial = nil
	}
}
