//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestShedExecutableSelf runs the real thing on the test binary: the binary's
// text and rodata are found, paging them out leaves the process working, and
// the outcome is logged once.
func TestShedExecutableSelf(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := exeRanges(smaps, exe)
	_ = smaps.Close()
	if err != nil || len(ranges) < 2 {
		t.Fatalf("exeRanges of %s: %v, %v; want at least text and rodata", exe, ranges, err)
	}
	var text bool
	for _, r := range ranges {
		if r.size() == 0 || r.start%uintptr(os.Getpagesize()) != 0 {
			t.Errorf("range %#x-%#x not page-aligned or empty", r.start, r.end)
		}
		text = text || r.size() > 1<<20
	}
	if !text {
		t.Errorf("no range over 1 MiB (the text) in %v", ranges)
	}

	// The linker has just written the binary: write it back first, as a
	// deployed binary is (the kernel pages out only clean pages).
	syncFile(t, exe)
	var buf bytes.Buffer
	before := fileRSS()
	shedExecutable(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	after := fileRSS()
	out := buf.String()
	t.Logf("file-backed Rss %s -> %s MiB; log: %s", mib(before), mib(after), out)
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "shed start-up memory") {
		t.Errorf("want one log line about the shed, got %q", out)
	}
	// The test binary is ours (go test built it as this user), so on a
	// kernel with MADV_PAGEOUT the kernel must have paged it out.
	want := "paged out the binary's file-backed pages"
	if !kernelAtLeast(t, 5, 4) {
		want = "Linux < 5.4"
	}
	if !strings.Contains(out, want) {
		t.Errorf("log %q does not say %q", out, want)
	}
	// The code paged out still runs (it faults back in).
	if got := strings.Repeat("ok", 2); got != "okok" {
		t.Fatal(got)
	}
	// Each shed range is marked for random access (VmFlags "rr"), so that a
	// page faulting back reads and maps no neighbours with it.
	if n := randomReadRanges(t, exe, ranges); n != len(ranges) {
		t.Errorf("%d of the %d shed ranges have VmFlags rr (MADV_RANDOM), want all", n, len(ranges))
	}
}

// TestDropCachedPages: a file read whole into the page cache (as an image
// pull or a copy leaves the binary) is out of it after dropCachedPages, so
// that a page of the binary faulting back after the shed maps no cached
// neighbours with it (the kernel's 64 KiB fault-around).
//
// A binary written a moment ago (an image layer just unpacked, a binary
// just copied) is dirty in the page cache, and the kernel drops only clean
// pages: dropCachedPages writes it back first, so its pages go too.
func TestDropCachedPages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string) // how the file came into the cache
	}{
		{"read whole, clean", syncAndRead},
		{"just written, dirty", func(*testing.T, string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bin")
			if err := os.WriteFile(path, bytes.Repeat([]byte("selftaint"), 4<<20/9), 0o555); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, path)
			before, total := cachedPages(t, path)
			if before < total/2 {
				t.Fatalf("the page cache keeps only %d of the file's %d pages: cannot tell whether they are dropped", before, total)
			}
			if err := dropCachedPages(path); err != nil {
				t.Fatal(err)
			}
			after, _ := cachedPages(t, path)
			t.Logf("cached pages of %d: %d before, %d after", total, before, after)
			if after > total/10 {
				t.Errorf("after dropCachedPages %d of the file's %d pages are in the page cache (%d before): want them written back and dropped", after, total, before)
			}
		})
	}
	if err := dropCachedPages(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("dropCachedPages of a missing file: no error")
	}
}

// syncFile writes the file at path back to its disk.
func syncFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// syncAndRead writes the file at path back to its disk, then reads it whole.
func syncAndRead(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatal(err)
	}
}

// cachedPages counts the pages of the file at path in the page cache
// (mincore over a fresh read-only mapping), and the file's pages.
func cachedPages(t *testing.T, path string) (cached, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	for _, v := range vec {
		cached += int(v & 1)
	}
	return cached, len(vec)
}

// randomReadRanges counts the mappings of exe in /proc/self/smaps that start
// one of ranges and whose VmFlags hold rr (madvise MADV_RANDOM).
func randomReadRanges(t *testing.T, exe string, ranges []memRange) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	starts := map[uintptr]bool{}
	for _, r := range ranges {
		starts[r.start] = true
	}
	n, cur := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		if r, _, path, ok := parseMapsLine(line); ok {
			cur = path == exe && starts[r.start]
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && cur {
			for _, f := range strings.Fields(flags) {
				if f == "rr" {
					n++
				}
			}
		}
	}
	return n
}

func TestPageOut(t *testing.T) {
	ranges := []memRange{{0x1000, 0x3000}, {0x3000, 0x4000}, {0x8000, 0x10000}}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// A kernel without MADV_PAGEOUT: one debug line, nothing more tried.
	calls := 0
	advised, ok := pageOut(ranges, func(memRange) error { calls++; return unix.EINVAL }, logger)
	if ok || advised != 0 || calls != 1 {
		t.Errorf("EINVAL: advised %d, ok %v after %d calls; want 0, false after 1", advised, ok, calls)
	}
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "Linux < 5.4") {
		t.Errorf("EINVAL logged %q, want one debug line", out)
	}

	// A range unmapped meanwhile (ENOMEM) is skipped; the rest are advised.
	buf.Reset()
	var seen []memRange
	advised, ok = pageOut(ranges, func(r memRange) error {
		seen = append(seen, r)
		if r.start == 0x3000 {
			return unix.ENOMEM
		}
		return nil
	}, logger)
	if !ok || advised != 0x2000+0x8000 || len(seen) != 3 {
		t.Errorf("ENOMEM on one: advised %#x, ok %v, calls %d; want 0xa000, true, 3", advised, ok, len(seen))
	}
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Errorf("ENOMEM not logged at debug: %q", buf.String())
	}
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	var maj, min int
	if _, err := fmt.Sscanf(release, "%d.%d", &maj, &min); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	return maj > major || (maj == major && min >= minor)
}
