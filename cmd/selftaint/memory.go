package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Shedding start-up memory (--shed-startup-memory).
//
// Most of the binary's pages that `selftaint agent` touches are touched once:
// package initialisation of client-go and the API machinery, flag and config
// parsing, scheme registration, informer start-up, the first list. They stay
// mapped, and count in the agent's Rss, for as long as the process lives.
// Once the agent is in steady state (its first sync written, then
// shedSettle), it asks the kernel to page out the file-backed pages of its
// own executable (madvise(MADV_PAGEOUT), Linux >= 5.4). The pages the
// steady-state loop needs fault back in from the page cache or the file;
// nothing else changes. Anonymous memory (heap, stacks, written data) is
// never advised, nor any other file's mappings (libc, libnvidia-ml).
//
// The kernel pages out a file's pages only for a process that owns the file
// or may open it for writing (otherwise MADV_PAGEOUT would be a side channel
// on shared page cache); for anyone else the call succeeds and does nothing.
// The result is logged once, with the file-backed Rss before and after.

// shedSettle is how long after the agent is first ready (informer synced,
// first sync written) the start-up pages are shed: the first probe round,
// the first writes and the informer's first resync are over by then.
const shedSettle = 30 * time.Second

// shedPoll is how often the agent's readiness is checked until it is ready.
const shedPoll = time.Second

// shedWhenSettled calls shed once, settle after ready first returns nil
// (polled every poll), unless ctx ends first. It reports whether shed ran.
func shedWhenSettled(ctx context.Context, ready func() error, poll, settle time.Duration, shed func()) bool {
	t := time.NewTicker(poll)
	defer t.Stop()
	for ready() != nil {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	timer := time.NewTimer(settle)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	}
	shed()
	return true
}

// shedRedrop is how long after the shed the binary's unmapped pages are
// dropped from the page cache once more: right after the page-out the
// kernel keeps some of the pages it unmapped (a third to a half of the
// binary, measured on Linux 6.18) and drops them when asked a moment later.
const shedRedrop = 2 * time.Second

// startShedding sheds the executable's start-up pages in the background
// (see above) once ready reports the agent ready and shedSettle has passed,
// and drops its unmapped pages from the page cache again shedRedrop later.
func startShedding(ctx context.Context, ready func() error, logger *slog.Logger) {
	go func() {
		if !shedWhenSettled(ctx, ready, shedPoll, shedSettle, func() { shedExecutable(logger) }) {
			return
		}
		t := time.NewTimer(shedRedrop)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			redropExecutable(logger)
		}
	}()
}

// memRange is a range of virtual addresses, [start, end).
type memRange struct {
	start, end uintptr
}

func (r memRange) size() uintptr { return r.end - r.start }

// exeRanges reads /proc/PID/smaps (or /proc/PID/maps: then no mapping is
// known to hold anonymous pages) and returns the mappings to page out: those
// of the file exe (the target of /proc/self/exe, compared as the kernel
// prints both, " (deleted)" included) that are readable and not writable
// (r-x and r--: text, rodata, the ELF headers) and hold no anonymous pages.
// The RELRO page (relocated, then made read-only) and text a debugger has
// patched hold private copies: they are left alone, as is everything
// writable, anonymous or another file's.
func exeRanges(smaps io.Reader, exe string) ([]memRange, error) {
	var (
		out  []memRange
		cur  memRange
		keep bool // cur is a candidate
	)
	flush := func() {
		if keep {
			out = append(out, cur)
		}
		keep = false
	}
	sc := bufio.NewScanner(smaps)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if r, perms, path, ok := parseMapsLine(line); ok {
			flush()
			cur = r
			keep = path == exe && len(perms) >= 4 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p'
			continue
		}
		// A field of the current mapping (smaps only).
		if keep && strings.HasPrefix(line, "Anonymous:") {
			if kb := strings.Fields(strings.TrimPrefix(line, "Anonymous:")); len(kb) == 0 || kb[0] != "0" {
				keep = false
			}
		}
	}
	flush()
	return out, sc.Err()
}

// parseMapsLine parses a mapping's line of /proc/PID/maps or smaps:
//
//	00400000-0040c000 r-xp 00000000 fd:01 1234    /usr/bin/selftaint
//
// The path is everything after the inode and its padding (it may contain
// spaces); it is empty for anonymous mappings. ok is false for smaps' field
// lines ("Rss:   12 kB") and anything else that is not a mapping.
func parseMapsLine(line string) (r memRange, perms, path string, ok bool) {
	rest := line
	var fields [5]string
	for i := range fields {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			if i < 4 {
				return memRange{}, "", "", false
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return memRange{}, "", "", false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start || len(fields[1]) != 4 {
		return memRange{}, "", "", false
	}
	if _, err := strconv.ParseUint(fields[4], 10, 64); err != nil { // the inode
		return memRange{}, "", "", false
	}
	return memRange{uintptr(start), uintptr(end)}, fields[1], strings.TrimLeft(rest, " "), true
}
