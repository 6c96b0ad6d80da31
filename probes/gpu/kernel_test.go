package gpu

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// NVRM Xid lines parse as the drivers print them, with any log prefix;
// everything else is no Xid.
func TestParseNVRMXid(t *testing.T) {
	tests := []struct {
		name string
		line string
		ok   bool
		want KernelXid
	}{
		{name: "current driver", line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "pid=1234, name=python3, GPU has fallen off the bus."}},
		{name: "pid unknown, quoted", line: "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address",
			ok: true, want: KernelXid{PCIBusID: "0000:cb:00.0", Xid: 13, Text: "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address"}},
		{name: "older driver, no PCI: and no pid", line: "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "GPU has fallen off the bus."}},
		{name: "double bit error", line: "NVRM: Xid (PCI:0000:3b:00): 48, pid=2291, name=train, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 48, Text: "pid=2291, name=train, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."}},
		{name: "channel id", line: "NVRM: Xid (PCI:0000:07:00): 31, pid=9, name=x, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS",
			ok: true, want: KernelXid{PCIBusID: "0000:07:00.0", Xid: 31, Text: "pid=9, name=x, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS"}},
		{name: "dmesg timestamp prefix", line: "[12345.678901] NVRM: Xid (PCI:0000:B7:00): 119, pid=77, name=nv, Timeout after 6s of waiting for RPC response from GPU1 GSP!",
			ok: true, want: KernelXid{PCIBusID: "0000:b7:00.0", Xid: 119, Text: "pid=77, name=nv, Timeout after 6s of waiting for RPC response from GPU1 GSP!"}},
		{name: "kmsg priority prefix", line: "<3>NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}},
		{name: "syslog prefix, trailing newline", line: "Mar  1 12:00:00 node1 kernel: [  42.1] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "GPU has fallen off the bus."}},
		{name: "8-digit domain as NVML writes it", line: "NVRM: Xid (PCI:00000000:3B:00): 79, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79, Text: "x"}},
		{name: "VMD domain", line: "NVRM: Xid (PCI:10000:01:00): 79, x",
			ok: true, want: KernelXid{PCIBusID: "10000:01:00.0", Xid: 79, Text: "x"}},
		{name: "function printed", line: "NVRM: Xid (PCI:0000:3b:00.0): 94, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 94, Text: "x"}},
		{name: "no text", line: "NVRM: Xid (PCI:0000:3b:00): 79",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79}},
		{name: "largest number", line: "NVRM: Xid (PCI:0000:3b:00): 18446744073709551615, x",
			ok: true, want: KernelXid{PCIBusID: "0000:3b:00.0", Xid: 18446744073709551615, Text: "x"}},
		{name: "number past 64 bits", line: "NVRM: Xid (PCI:0000:3b:00): 18446744073709551616, x"},
		{name: "huge number", line: "NVRM: Xid (PCI:0000:3b:00): 999999999999999999999999999999, x"},
		{name: "negative number", line: "NVRM: Xid (PCI:0000:3b:00): -79, x"},
		{name: "number with letters", line: "NVRM: Xid (PCI:0000:3b:00): 79abc, x"},
		{name: "no number", line: "NVRM: Xid (PCI:0000:3b:00): , x"},
		{name: "bus id garbage", line: "NVRM: Xid (PCI:zz:3b:00): 79, x"},
		{name: "no bus id", line: "NVRM: Xid (): 79, x"},
		{name: "other NVRM line", line: "NVRM: GPU at PCI:0000:3b:00: GPU-5d5b4d3f-0a4e-4d8b-9c36-000000000000"},
		{name: "NVRM version", line: "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"},
		{name: "NVRM fallen off without Xid", line: "NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:20b0) installed in this system has fallen off the bus."},
		{name: "NVSwitch SXid", line: "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error"},
		{name: "empty", line: ""},
		{name: "garbage", line: "\x00\xff NVRM: Xid ((((( 79"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseNVRMXid(tt.line)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseNVRMXid(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// kernelLine is the NVRM line of Xid x on GPU i of the fake, as a current
// driver prints it.
func (f *fake) kernelLine(i int, x uint64) string {
	return fmt.Sprintf("NVRM: Xid (PCI:0000:%02x:00): %d, pid='<unknown>', name=<unknown>, some text", busIDs[i], x)
}

// kernelXid feeds m the line of Xid x on GPU i, parsed as the log monitor
// parses it.
func (f *fake) kernelXid(t testing.TB, m *Monitor, i int, x uint64) {
	t.Helper()
	k, ok := ParseNVRMXid(f.kernelLine(i, x))
	if !ok {
		t.Fatalf("ParseNVRMXid(%q): not an Xid", f.kernelLine(i, x))
	}
	m.KernelXid(k)
}

// nvmlXids pushes NVML Xid events of GPU i and waits until the watcher
// has filed them: they are handed out, and the watcher has started the
// wait after the last one's.
func (f *fake) nvmlXids(t testing.TB, i int, xs ...uint64) {
	t.Helper()
	f.push(xids(i, xs...)(f)...)
	eventually(t, "the events handed out", func() bool { return f.queued() == 0 })
	waits := f.called("EventSetWait")
	eventually(t, "the watcher waits again", func() bool { return f.called("EventSetWait") > waits })
}

// xid79On3 is the fatal probe's verdict on an Xid 79 on GPU 3 seen once.
var xid79On3 = want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
	message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}}

// A kernel Xid 79 is reported while every NVML call hangs: the hang that
// hides NVML's event hides nothing the kernel says. KernelXid returns
// while a probe run is hung in NVML.
func TestKernelXidWhileNVMLHung(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
	f.hangAll()
	hungNote := "counting GPUs: NVML: NVML call nvmlDeviceGetCount has not returned"
	f.check(t, "hung, no kernel Xid", runProbe(m, NameFatal, time.Second),
		want{status: probes.StatusUnknown, reason: ReasonReadError, message: []string{hungNote}})

	running := make(chan probes.Result, 1)
	go func() { running <- runProbe(m, NameFatal, 3*time.Second) }() // hangs in NVML meanwhile
	fed := make(chan struct{})
	go func() {
		f.kernelXid(t, m, 3, 79)
		close(fed)
	}()
	select {
	case <-fed:
	case <-time.After(10 * time.Second):
		t.Fatal("KernelXid blocked behind the hung NVML")
	}
	<-running
	hung := xid79On3
	hung.message = append(hung.message, hungNote)
	for run := range 2 {
		f.check(t, fmt.Sprintf("hung, kernel Xid 79, run %d", run), runProbe(m, NameFatal, time.Second), hung)
	}
}

// A kernel Xid whose bus id no GPU has yet is the node's, naming the PCI
// address; once a GPU is identified at that address it is the GPU's.
// A bus id no GPU ever has stays the node's.
func TestKernelXidUnknownBusID(t *testing.T) {
	f := newFake(t)
	f.hangAll()
	m := newMonitor(t, f, testConfig(), Env{})
	f.kernelXid(t, m, 3, 79)
	f.check(t, "NVML hung from the start", runProbe(m, NameFatal, time.Second), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"a GPU NVML did not identify: PCI {pci3} (from the kernel log): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}})

	f2 := newFake(t)
	m2 := newMonitor(t, f2, testConfig(), Env{})
	f2.kernelXid(t, m2, 3, 79)
	k, _ := ParseNVRMXid("NVRM: Xid (PCI:0000:3b:00): 48, x")
	m2.KernelXid(k)
	got := f2.waitFor(t, m2, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{
		"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node",
		"a GPU NVML did not identify: PCI 0000:3b:00.0 (from the kernel log): Xid 48 (Double Bit ECC Error) at " + stamp0 + "; reset the GPU"},
		not: []string{"PCI {pci3} (from the kernel log)"}})
	if r := reading(got.Readings, "gpu3"); !strings.Contains(r, "fatal xid 79 x1") {
		t.Errorf("got reading gpu3 %q, want it to contain %q", r, "fatal xid 79 x1")
	}
}

// Kernel Xids are judged by the catalog with config's overrides, as
// NVML's are (TestXidCatalogActions).
func TestKernelXidCatalogActions(t *testing.T) {
	ok := want{status: probes.StatusOK, reason: ReasonGPUsHealthy, message: []string{"8 GPUs healthy"}, not: []string{"Xid 79 (", "Xid 13 ("}}
	tests := []struct {
		name    string
		cfg     func(c *Config)
		xids    []uint64 // on GPU 3
		want    want
		reading string // in GPU 3's reading of the fatal probe
	}{
		{name: "79 needs a reboot", xids: []uint64{79}, want: xid79On3, reading: "fatal xid 79 x1"},
		{name: "48 needs a reset", xids: []uint64{48}, want: want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 3 ({uuid3}): Xid 48 (Double Bit ECC Error) at " + stamp0 + "; reset the GPU"}}},
		{name: "13 restarts the application", xids: []uint64{13, 13}, want: ok, reading: "other xid 13 x2"},
		{name: "SkipXids ignores 79", cfg: func(c *Config) { c.SkipXids = []uint64{79} }, xids: []uint64{79, 13}, want: ok, reading: "other xid 79 x1, 13 x1"},
		{name: "Xids ignores 79", cfg: func(c *Config) { c.Xids = map[uint64]Action{79: ActionIgnore} }, xids: []uint64{79}, want: ok, reading: "other xid 79 x1"},
		{name: "config makes 63 fatal", cfg: func(c *Config) { c.Xids = map[uint64]Action{63: ActionReboot} }, xids: []uint64{63},
			want: want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 3 ({uuid3}): Xid 63 (GPU memory remapping event) at " + stamp0 + "; reboot the node"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			m := newMonitor(t, f, cfg, Env{})
			f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
			for _, x := range tt.xids {
				f.kernelXid(t, m, 3, x)
			}
			got := runProbe(m, NameFatal, runTimeout)
			f.check(t, NameFatal, got, tt.want)
			if r := reading(got.Readings, "gpu3"); tt.reading != "" && !strings.Contains(r, tt.reading) {
				t.Errorf("got reading gpu3 %q, want it to contain %q", r, tt.reading)
			}
		})
	}
}

// The same Xid on the same GPU from NVML and the kernel log within
// XidDedupeWindow counts once, whichever comes first; occurrences pair one
// to one; out of the window, or on another GPU, they are two.
func TestKernelXidCountedOnce(t *testing.T) {
	type step struct {
		kernel bool // else NVML
		gpu    int
		xid    uint64
		after  time.Duration // the clock steps this much first
	}
	k := func(gpu int, xid uint64) step { return step{kernel: true, gpu: gpu, xid: xid} }
	n := func(gpu int, xid uint64) step { return step{gpu: gpu, xid: xid} }
	later := func(s step, d time.Duration) step { s.after = d; return s }
	tests := []struct {
		name     string
		steps    []step
		readings map[string]string // GPU reading: what it contains
	}{
		{name: "NVML first", steps: []step{n(3, 79), k(3, 79)}, readings: map[string]string{"gpu3": "fatal xid 79 x1"}},
		{name: "kernel first", steps: []step{k(3, 79), n(3, 79)}, readings: map[string]string{"gpu3": "fatal xid 79 x1"}},
		{name: "at the window's end", steps: []step{k(3, 79), later(n(3, 79), XidDedupeWindow)}, readings: map[string]string{"gpu3": "fatal xid 79 x1"}},
		{name: "past the window", steps: []step{k(3, 79), later(n(3, 79), XidDedupeWindow+time.Second)}, readings: map[string]string{"gpu3": "fatal xid 79 x2"}},
		{name: "pairs one to one", steps: []step{k(3, 79), k(3, 79), n(3, 79), n(3, 79), n(3, 79)}, readings: map[string]string{"gpu3": "fatal xid 79 x3"}},
		{name: "a minor Xid too", steps: []step{n(3, 13), k(3, 13), k(3, 13)}, readings: map[string]string{"gpu3": "other xid 13 x2"}},
		{name: "other GPU", steps: []step{k(3, 79), n(5, 79)}, readings: map[string]string{"gpu3": "fatal xid 79 x1", "gpu5": "fatal xid 79 x1"}},
		{name: "other Xid", steps: []step{k(3, 79), n(3, 48)}, readings: map[string]string{"gpu3": "fatal xid 79 x1, 48 x1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
			for _, s := range tt.steps {
				f.clk.Step(s.after)
				if s.kernel {
					f.kernelXid(t, m, s.gpu, s.xid)
				} else {
					f.nvmlXids(t, s.gpu, s.xid)
				}
			}
			got := runProbe(m, NameFatal, runTimeout)
			for name, sub := range tt.readings {
				if r := reading(got.Readings, name); !strings.Contains(r, sub) {
					t.Errorf("got reading %s %q, want it to contain %q", name, r, sub)
				}
			}
		})
	}
}

// KernelXid is safe for concurrent use: kernel Xids fed from several
// goroutines while NVML events arrive and the probes run all count.
func TestKernelXidConcurrent(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				f.kernelXid(t, m, 2, 13)
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			runBoth(m)
		}
	})
	f.nvmlXids(t, 6, 13, 13, 13)
	wg.Wait()
	got := runProbe(m, NameFatal, runTimeout)
	for name, sub := range map[string]string{"gpu2": "other xid 13 x100", "gpu6": "other xid 13 x3"} {
		if r := reading(got.Readings, name); !strings.Contains(r, sub) {
			t.Errorf("got reading %s %q, want it to contain %q", name, r, sub)
		}
	}
}

// A kernel Xid the node holds (no GPU had its bus id) is kept across a
// restart with its PCI address, and filed under the GPU identified there
// afterwards; a state whose stray PCI address is none is refused.
func TestKernelXidStrayKept(t *testing.T) {
	f := newFake(t)
	f.hangAll()
	m := newMonitor(t, f, testConfig(), Env{})
	f.kernelXid(t, m, 3, 79)
	st := m.State()
	if !strings.Contains(string(st), `"pci":"`+f.pci(3)+`"`) {
		t.Fatalf("state %s: want the stray Xid's PCI address %s", st, f.pci(3))
	}

	f2 := newFake(t)
	m2 := newMonitor(t, f2, testConfig(), Env{})
	if err := m2.Restore(st); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	f2.check(t, "restored", runProbe(m2, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 3 ({uuid3}): Xid 79 (GPU has fallen off the bus) at " + stamp0}, not: []string{"did not identify"}})

	bad := strings.Replace(string(st), f.pci(3), "zz:3b", 1)
	m3 := newMonitor(t, newFake(t), testConfig(), Env{})
	if err := m3.Restore([]byte(bad)); err == nil || !strings.Contains(err.Error(), "stray[0].pci") {
		t.Errorf("Restore(%s): got %v, want an error naming stray[0].pci", bad, err)
	}
}

// waker is the shape of probes.Waker (the runner's, on its own branch).
type waker interface {
	Watch(ctx context.Context, wake func()) error
}

// The fatal probe wakes on each fatal Xid filed, from the kernel log or
// NVML, and on nothing else: not a minor Xid, not an Xid counted once
// already, not after its Watch returned.
func TestFatalProbeWakesOnFatalXid(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.check(t, "first run", runProbe(m, NameFatal, runTimeout), fatalOK)
	w, ok := m.FatalProbe().(waker)
	if !ok {
		t.Fatal("the fatal probe has no Watch")
	}
	if _, ok := m.DegradedProbe().(waker); ok {
		t.Error("the degraded probe has a Watch: nothing wakes it")
	}
	var wakes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx, func() { wakes.Add(1) }) }()
	eventually(t, "Watch registered", func() bool {
		m.wakeMu.Lock()
		defer m.wakeMu.Unlock()
		return len(m.wake.funcs) == 1
	})
	steps := []struct {
		what  string
		do    func()
		wakes int64 // in all, after it
	}{
		{"a minor kernel Xid", func() { f.kernelXid(t, m, 3, 13) }, 0},
		{"a fatal kernel Xid", func() { f.kernelXid(t, m, 3, 79) }, 1},
		{"NVML's report of it", func() { f.nvmlXids(t, 3, 79) }, 1},
		{"a fatal NVML Xid", func() { f.nvmlXids(t, 5, 48) }, 2},
		{"a minor NVML Xid", func() { f.nvmlXids(t, 5, 13) }, 2},
		{"a kernel Xid of an unknown bus id", func() { m.KernelXid(KernelXid{PCIBusID: "0000:3b:00.0", Xid: 79}) }, 3},
		{"a fatal kernel Xid while NVML hangs", func() { f.hangAll(); f.kernelXid(t, m, 6, 79) }, 4},
	}
	for _, s := range steps {
		s.do()
		if got := wakes.Load(); got != s.wakes {
			t.Errorf("after %s: got %d wakes, want %d", s.what, got, s.wakes)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: got %v, want nil", err)
	}
	f.kernelXid(t, m, 7, 79)
	if got := wakes.Load(); got != 4 {
		t.Errorf("after Watch returned: got %d wakes, want 4", got)
	}
	f.release()
	m.Close()
	if err := w.Watch(context.Background(), func() {}); err == nil {
		t.Error("Watch of a closed Monitor: got nil, want an error")
	}
}
