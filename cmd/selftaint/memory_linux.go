//go:build linux

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// shedExecutable pages out the file-backed pages of the process's own
// executable (see memory.go) and logs the outcome once.
func shedExecutable(logger *slog.Logger) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		logger.Debug("shed start-up memory: skipped", "err", err)
		return
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		logger.Debug("shed start-up memory: skipped", "err", err)
		return
	}
	ranges, err := exeRanges(f, exe)
	_ = f.Close()
	if err != nil {
		logger.Debug("shed start-up memory: skipped", "err", err)
		return
	}
	before := fileRSS()
	// Random access first, then the binary's unmapped pages out of the page
	// cache, then the page-out, then whatever is left unmapped out of the
	// cache again. Dropping before the page-out matters: a fault between
	// the page-out and a drop would map a page of a large folio still
	// cached (the start-up never touched it), the folio would stay cached
	// while mapped, and every later fault in it would map its cached
	// neighbours.
	randomErr := adviseRandom(ranges)
	dropErr := dropCachedPages(exe)
	advised, ok := pageOut(ranges, madvisePageout, logger)
	if !ok {
		return
	}
	if err := errors.Join(randomErr, dropErr, dropCachedPages(exe)); err != nil {
		logger.Debug("shed start-up memory: advising the binary's pages", "err", err)
	}
	after := fileRSS()
	attrs := []any{"binary", exe, "advisedMiB", mib(int64(advised)), "fileBackedRssMiB", mib(before), "afterMiB", mib(after)}
	if before >= 0 && after >= 0 && after > before*9/10 {
		// Pages another process maps too are left alone as well.
		if hint := pageoutHint(exe); hint != "" {
			attrs = append(attrs, "hint", hint)
		}
		logger.Info("shed start-up memory: the kernel paged out little or nothing", attrs...)
		return
	}
	logger.Info("shed start-up memory: paged out the binary's file-backed pages", attrs...)
}

// pageOut advises each range with advise (madvisePageout) and returns how
// many bytes it advised; ok is false, with one debug line logged, when the
// kernel refuses the advice as unknown (EINVAL on the first range).
func pageOut(ranges []memRange, advise func(memRange) error, logger *slog.Logger) (advised uintptr, ok bool) {
	for i, r := range ranges {
		if err := advise(r); err != nil {
			if errors.Is(err, unix.EINVAL) && i == 0 {
				logger.Debug("shed start-up memory: madvise(MADV_PAGEOUT) refused (EINVAL: Linux < 5.4, or locked memory); nothing shed")
				return 0, false
			}
			// ENOMEM: the range is no longer mapped; go on with the rest.
			logger.Debug("shed start-up memory: madvise failed", "range", fmt.Sprintf("%#x-%#x", r.start, r.end), "err", err)
			continue
		}
		advised += r.size()
	}
	return advised, true
}

// redropExecutable drops the executable's unmapped pages from the page cache
// again, a moment after the shed (shedRedrop).
func redropExecutable(logger *slog.Logger) {
	exe, err := os.Readlink("/proc/self/exe")
	if err == nil {
		err = dropCachedPages(exe)
	}
	if err != nil {
		logger.Debug("shed start-up memory: dropping the binary's cached pages again failed", "err", err)
	}
}

// dropCachedPages asks the kernel to drop the pages of the file at path (the
// executable) from the page cache (posix_fadvise POSIX_FADV_DONTNEED over the whole file), after
// the shed. The kernel drops only clean pages that no process maps: what
// this process or another still maps stays. Without it a page that faults
// back in maps its cached neighbours with it (the kernel's fault-around,
// 64 KiB, which MADV_RANDOM does not turn off), and the page cache holds
// most of the binary: it was read whole when the image was pulled or the
// binary copied, and the start-up's faults read ahead. With it Rss holds
// the pages the steady-state loop touches, each read (from the disk, or
// from the page cache if another reader brought it back) on its first
// touch after the shed.
//
// The file's dirty pages are written back first (fdatasync): the kernel
// drops, and pages out, only clean pages, and a binary written moments
// before the agent started (an image layer just unpacked, a binary just
// copied) can still be dirty when the shed comes, 30 s after the first
// sync, within the kernel's 30 s dirty expiry and its flusher's 5 s period:
// then nothing was shed (a side-by-side run saw 33 MiB of file-backed Rss
// on three agents of five whose binaries were copied just before).
func dropCachedPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the executable: %w", err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("fdatasync %s (its dirty pages cannot be dropped): %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise(POSIX_FADV_DONTNEED) on %s: %w", path, err)
	}
	return nil
}

// adviseRandom advises each range MADV_RANDOM: a page of the binary that
// faults back in after the shed is then read alone. Without it a fault
// reads ahead (128 KiB and more, in large folios) and maps what it read (a
// large folio whole on Linux >= 6.18, else the 64 KiB fault-around), so
// every page the steady-state loop touches brought back tens of its
// neighbours: most of .rodata, a third of .text and .gopclntab were
// resident again within minutes (hack/rss.sh). The cost is a page read per
// first touch of a page that is not in the page cache, once.
func adviseRandom(ranges []memRange) error {
	var errs []error
	for _, r := range ranges {
		if err := madvise(r, unix.MADV_RANDOM); err != nil {
			errs = append(errs, fmt.Errorf("madvise(MADV_RANDOM) %#x-%#x: %w", r.start, r.end, err))
		}
	}
	return errors.Join(errs...)
}

// madvisePageout is madvise(MADV_PAGEOUT) over r.
func madvisePageout(r memRange) error { return madvise(r, unix.MADV_PAGEOUT) }

// madvise is madvise(2) over r: the raw system call, as r is memory this
// program does not own as a Go value.
func madvise(r memRange, advice int) error {
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.size(), uintptr(advice))
	if errno != 0 {
		return errno
	}
	return nil
}

// fileRSS is the process's resident file-backed (and shared) memory in
// bytes, from /proc/self/statm's third field; -1 when unknown.
func fileRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return -1
	}
	pages, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}

// pageoutHint says why MADV_PAGEOUT may have left the binary's pages alone:
// the kernel pages out a file's pages only for its owner (or a process with
// CAP_FOWNER) or one that may write it, and a container image's binary is
// usually root's while the agent runs as another user.
func pageoutHint(exe string) string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return ""
	}
	euid := os.Geteuid()
	if euid == 0 || int(st.Uid) == euid {
		return ""
	}
	return fmt.Sprintf("the kernel pages out a file's pages only for its owner or a process that may write it: %s is owned by uid %d, the agent runs as uid %d (chown the binary to the agent's user in the image)", exe, st.Uid, euid)
}

func mib(b int64) string {
	if b < 0 {
		return "unknown"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}
