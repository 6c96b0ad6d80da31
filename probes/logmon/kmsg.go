package logmon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The kmsg source reads /dev/kmsg's records (Documentation/ABI/testing/
// dev-kmsg): "prio,seq,usec,flags[,...];message\n", then dictionary lines
// that start with a space. We parse them ourselves instead of using
// github.com/euank/go-kmsg-parser (what NPD uses) because that library
// swallows the EPIPE a reader gets when the kernel overwrote records it had
// not read yet, and drops sequence numbers, so an overrun cannot be reported
// or sized; the format is a few lines of code.

// Gap is records the reader did not get.
type Gap struct {
	// Overrun is true when the kernel said so (EPIPE); Lost is how many
	// records the sequence numbers skipped (0 when unknown yet).
	Overrun bool
	Lost    uint64
	// After is the last sequence number read before the gap.
	After uint64
}

// String says what was lost, for messages and Events.
func (g Gap) String() string {
	switch {
	case g.Lost > 0:
		return fmt.Sprintf("%d kernel log records after sequence %d were overwritten before they were read", g.Lost, g.After)
	default:
		return fmt.Sprintf("the kernel log overran after sequence %d: records were overwritten before they were read", g.After)
	}
}

// kmsgScanner turns bytes read from kmsg (one record per read from the
// device; any split from a FIFO or file standing in for it) into Lines and
// Gaps. It is pure. One scanner serves every open of the log in a boot: a
// record at or before the last sequence number seen is one read before
// (the kernel hands its whole ring buffer again to a reader that opens it
// again) and is skipped.
type kmsgScanner struct {
	boot     time.Time // when the kernel's clock was 0
	partial  []byte    // an unfinished line
	skipping bool      // dropping the rest of a record longer than maxRecord
	last     uint64    // the last sequence number seen
	seen     bool      // whether last is set
}

// maxRecord is the longest record kept (the kernel writes at most 8 KiB
// with its dictionary); the rest of a longer one is skipped, as garbage.
const maxRecord = 64 << 10

// reopened readies the scanner for a new open of the log: what was left
// unfinished by the last one is dropped.
func (s *kmsgScanner) reopened() {
	s.partial, s.skipping = nil, false
}

// feed scans data; it calls line for each record, gap where the sequence
// numbers skip some and bad for what is not a record (said, then skipped).
func (s *kmsgScanner) feed(data []byte, line func(Line), gap func(Gap), bad func(string)) {
	s.partial = append(s.partial, data...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			if len(s.partial) > maxRecord {
				if !s.skipping {
					bad(fmt.Sprintf("kmsg record %s: longer than %d bytes", quote(string(s.partial)), maxRecord))
				}
				s.partial, s.skipping = s.partial[:0], true
			}
			return
		}
		rec := string(s.partial[:i])
		s.partial = s.partial[i+1:]
		if s.skipping {
			s.skipping = false
			continue
		}
		if rec == "" || rec[0] == ' ' { // dictionary line
			continue
		}
		if len(rec) > maxRecord {
			bad(fmt.Sprintf("kmsg record %s: longer than %d bytes", quote(rec), maxRecord))
			continue
		}
		l, err := parseKmsgRecord(rec, s.boot)
		if err != nil {
			bad(err.Error())
			continue
		}
		if s.seen && l.Seq <= s.last {
			continue // read before this open
		}
		if s.seen && l.Seq > s.last+1 {
			gap(Gap{Lost: l.Seq - s.last - 1, After: s.last})
		}
		s.last, s.seen = l.Seq, true
		line(l)
	}
}

// quote is s quoted for a message, cut to its first 100 bytes.
func quote(s string) string {
	if len(s) > 100 {
		return strconv.Quote(s[:100]) + "..."
	}
	return strconv.Quote(s)
}

// parseKmsgRecord parses "prio,seq,usec,flags;message". A message that is
// not valid UTF-8 (the kernel escapes what is not printable, a file
// standing in for it may not) has its invalid bytes replaced.
func parseKmsgRecord(rec string, boot time.Time) (Line, error) {
	head, msg, ok := strings.Cut(rec, ";")
	if !ok {
		return Line{}, fmt.Errorf("kmsg record %s: no ';'", quote(rec))
	}
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return Line{}, fmt.Errorf("kmsg record %s: want prio,seq,usec", quote(rec))
	}
	_, err0 := strconv.ParseUint(f[0], 10, 32)
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	usec, err2 := strconv.ParseUint(f[2], 10, 63)
	if err := errors.Join(err0, err1, err2); err != nil {
		return Line{}, fmt.Errorf("kmsg record %s: %w", quote(rec), err)
	}
	return Line{Time: boot.Add(time.Duration(usec) * time.Microsecond), Message: strings.ToValidUTF8(msg, "\uFFFD"), Seq: seq}, nil
}

// ReadKmsg reads records from r (an open /dev/kmsg, or a FIFO or file
// standing in for it) until ctx ends or r fails; boot is when the
// kernel's monotonic clock was 0. See readKmsg; what is not a record is
// skipped.
func ReadKmsg(ctx context.Context, r io.Reader, boot time.Time, line func(Line), gap func(Gap)) error {
	return readKmsg(ctx, r, &kmsgScanner{boot: boot}, line, gap, func(string) {}, func() error { return nil })
}

// readKmsg reads records from r with s until ctx ends or r fails. An
// EPIPE (the kernel overwrote what was not read yet) is reported as an
// overrun Gap and reading goes on from the oldest record still there; a
// skip in sequence numbers as a Gap of its size; what is not a record is
// said to bad and skipped. At the end of a file or FIFO without writers
// it asks still (an error ends the read) and waits and reads on. A read blocked on /dev/kmsg returns only when a
// record comes: close r when ctx ends to stop it at once.
func readKmsg(ctx context.Context, r io.Reader, s *kmsgScanner, line func(Line), gap func(Gap), bad func(string), still func() error) error {
	buf := make([]byte, 8192) // the kernel's CONSOLE_EXT_LOG_MAX
	for ctx.Err() == nil {
		n, err := r.Read(buf)
		s.feed(buf[:n], line, gap, bad)
		switch {
		case err == nil:
		case errors.Is(err, syscall.EPIPE):
			gap(Gap{Overrun: true, After: s.last})
		case errors.Is(err, io.EOF):
			if n == 0 {
				if err := still(); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		default:
			return fmt.Errorf("reading kmsg: %w", err)
		}
	}
	return nil
}
