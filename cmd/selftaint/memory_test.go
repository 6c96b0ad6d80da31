package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// smapsFixture is /proc/self/smaps of `selftaint agent` linked with
// -Ttext-segment=0x401000, cut down to the fields exeRanges reads plus a few
// it must skip: the ELF headers (r--p), text (r-xp), rodata and pclntab
// (r--p), the RELRO page (r--p, but relocated: anonymous), data (rw-p), bss
// and the heap (anonymous), libc, a file whose name has the binary's as a
// prefix, and the vdso.
const smapsFixture = `00401000-00411000 r--p 00000000 fd:01 1234                               /usr/local/bin/selftaint
Size:                 64 kB
Rss:                  64 kB
Anonymous:             0 kB
00411000-01b55000 r-xp 00010000 fd:01 1234                               /usr/local/bin/selftaint
Size:              23824 kB
Rss:                9000 kB
Anonymous:             0 kB
01b55000-0356e000 r--p 01754000 fd:01 1234                               /usr/local/bin/selftaint
Size:              26724 kB
Rss:               14000 kB
Anonymous:             0 kB
0356e000-0356f000 r--p 0316c000 fd:01 1234                               /usr/local/bin/selftaint
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
0356f000-035fb000 rw-p 0316d000 fd:01 1234                               /usr/local/bin/selftaint
Size:                560 kB
Rss:                 300 kB
Anonymous:           120 kB
035fb000-05646000 rw-p 00000000 00:00 0 
Size:              32556 kB
Rss:                 200 kB
Anonymous:           200 kB
05fd0000-05ff1000 rw-p 00000000 00:00 0                                  [heap]
Size:                132 kB
Anonymous:            12 kB
c000000000-c000400000 rw-p 00000000 00:00 0 
Anonymous:          4096 kB
7f1c2a400000-7f1c2a428000 r--p 00000000 fd:01 5678                       /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f1c2a428000-7f1c2a5b0000 r-xp 00028000 fd:01 5678                       /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f1c2a600000-7f1c2a601000 r--p 00000000 fd:01 9999                       /usr/local/bin/selftaint.conf
Anonymous:             0 kB
7ffd1b5f3000-7ffd1b5f5000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestExeRanges(t *testing.T) {
	tests := []struct {
		name  string
		input string
		exe   string
		want  []memRange
	}{
		{
			name:  "smaps: headers, text, rodata; not RELRO, data, anonymous or other files",
			input: smapsFixture,
			exe:   "/usr/local/bin/selftaint",
			want: []memRange{
				{0x401000, 0x411000},
				{0x411000, 0x1b55000},
				{0x1b55000, 0x356e000},
			},
		},
		{
			name: "maps (no Anonymous lines): every read-only private mapping of the binary",
			input: `00401000-00411000 r--p 00000000 fd:01 1234 /bin/selftaint
00411000-01b55000 r-xp 00010000 fd:01 1234 /bin/selftaint
0356f000-035fb000 rw-p 0316d000 fd:01 1234 /bin/selftaint
`,
			exe:  "/bin/selftaint",
			want: []memRange{{0x401000, 0x411000}, {0x411000, 0x1b55000}},
		},
		{
			name: "a replaced binary: the kernel appends (deleted) to both names",
			input: `00411000-01b55000 r-xp 00010000 fd:01 1234    /usr/local/bin/selftaint (deleted)
Anonymous:             0 kB
01b55000-0356e000 r--p 01754000 fd:01 4321    /usr/local/bin/selftaint
Anonymous:             0 kB
`,
			exe:  "/usr/local/bin/selftaint (deleted)",
			want: []memRange{{0x411000, 0x1b55000}},
		},
		{
			name: "a path with spaces; position independent (high addresses)",
			input: `55d0c0a00000-55d0c0a10000 r--p 00000000 08:02 77  /opt/my tools/selftaint
Anonymous:             0 kB
55d0c0a10000-55d0c2150000 r-xp 00010000 08:02 77  /opt/my tools/selftaint
Anonymous:             0 kB
`,
			exe:  "/opt/my tools/selftaint",
			want: []memRange{{0x55d0c0a00000, 0x55d0c0a10000}, {0x55d0c0a10000, 0x55d0c2150000}},
		},
		{
			name: "text with private copies (a debugger's breakpoints) is left alone",
			input: `00411000-01b55000 r-xp 00010000 fd:01 1234 /bin/selftaint
Anonymous:             8 kB
`,
			exe: "/bin/selftaint",
		},
		{
			name: "shared, writable, inaccessible and executable-only mappings are left alone",
			input: `00400000-00410000 r--s 00000000 fd:01 1234 /bin/selftaint
00410000-00420000 rw-s 00000000 fd:01 1234 /bin/selftaint
00420000-00430000 ---p 00000000 fd:01 1234 /bin/selftaint
00430000-00440000 --xp 00000000 fd:01 1234 /bin/selftaint
00440000-00450000 rwxp 00000000 fd:01 1234 /bin/selftaint
`,
			exe: "/bin/selftaint",
		},
		{
			name: "garbage lines are skipped",
			input: `not a mapping
00401000 r--p 00000000 fd:01 1234 /bin/selftaint
00411000-00401000 r--p 00000000 fd:01 1234 /bin/selftaint
zz-00401000 r--p 00000000 fd:01 1234 /bin/selftaint
00401000-00411000 r--p 00000000 fd:01 x /bin/selftaint
00401000-00411000 r--p 00000000 fd:01

00501000-00511000 r--p 00000000 fd:01 1234 /bin/selftaint
`,
			exe:  "/bin/selftaint",
			want: []memRange{{0x501000, 0x511000}},
		},
		{
			name:  "the binary not mapped (or exe unknown)",
			input: smapsFixture,
			exe:   "/usr/bin/other",
		},
		{
			name:  "empty exe matches no anonymous mapping",
			input: smapsFixture,
			exe:   "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exeRanges(strings.NewReader(tc.input), tc.exe)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("exeRanges = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestParseMapsLine(t *testing.T) {
	r, perms, path, ok := parseMapsLine("7ffd1b5f3000-7ffd1b5f5000 r-xp 00000000 00:00 0                          [vdso]")
	if !ok || r != (memRange{0x7ffd1b5f3000, 0x7ffd1b5f5000}) || perms != "r-xp" || path != "[vdso]" {
		t.Errorf("vdso: %v %q %q %v", r, perms, path, ok)
	}
	if r, _, path, ok := parseMapsLine("035fb000-05646000 rw-p 00000000 00:00 0 "); !ok || path != "" || r.size() != 0x5646000-0x35fb000 {
		t.Errorf("anonymous: %v %q %v", r, path, ok)
	}
	for _, line := range []string{"Rss:                  64 kB", "VmFlags: rd ex mr mw me", "THPeligible:    0", ""} {
		if _, _, _, ok := parseMapsLine(line); ok {
			t.Errorf("%q parsed as a mapping", line)
		}
	}
}

func TestShedWhenSettled(t *testing.T) {
	var readyCalls atomic.Int32
	ready := func() error {
		if readyCalls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	start := time.Now()
	shed := 0
	if !shedWhenSettled(context.Background(), ready, time.Millisecond, 50*time.Millisecond, func() { shed++ }) {
		t.Fatal("shedWhenSettled returned false")
	}
	if shed != 1 || readyCalls.Load() != 3 {
		t.Errorf("shed %d times after %d readiness checks, want once after 3", shed, readyCalls.Load())
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("shed after %s, before the settle time", d)
	}

	// Never ready, or cancelled while settling: never shed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if shedWhenSettled(ctx, func() error { return errors.New("no") }, time.Millisecond, 0, func() { t.Error("shed while not ready") }) {
		t.Error("returned true while never ready")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if shedWhenSettled(ctx2, func() error { return nil }, time.Millisecond, time.Hour, func() { t.Error("shed before the settle time") }) {
		t.Error("returned true when cancelled while settling")
	}
}
