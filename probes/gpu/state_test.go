package gpu

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/selftaint/selftaint/probes"
)

// bootID returns an Env.BootID that says id.
func bootID(id string) func() (string, error) {
	return func() (string, error) { return id + "\n", nil }
}

// restarted is the same machine after the agent restarted: f's GPUs (their
// UUIDs), no events queued, a clock a minute on.
func (f *fake) restarted(t testing.TB) *fake {
	n := newFake(t)
	for i := range n.gpus {
		uuid := f.uuid(i)
		n.set(i, func(g *simGPU) { g.uuid = uuid })
	}
	n.clk.Step(f.clk.Now().Sub(t0) + time.Minute)
	return n
}

// stateWith runs a Monitor on f that sees evs, and returns its state.
func stateWith(t *testing.T, f *fake, boot string, w want, evs ...nvml.EventData) []byte {
	t.Helper()
	m := newMonitor(t, f, testConfig(), Env{BootID: bootID(boot)})
	f.push(evs...)
	f.waitFor(t, m, NameFatal, w)
	return m.State()
}

// A fatal Xid outlives the agent, until a recovery is observed.
func TestXidSurvivesRestart(t *testing.T) {
	held := map[uint64]want{
		94: {status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 94 (Contained memory error) at " + stamp0 + "; reset the GPU"}},
		79: {status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 79 (GPU has fallen off the bus) at " + stamp0 + "; reboot the node"}},
	}
	recovery := func(n uint64) func(*fake, *Monitor) {
		return func(f *fake, _ *Monitor) { f.set(2, func(g *simGPU) { g.recovery = n }) }
	}
	lost := func(f *fake, _ *Monitor) { f.fail(2, allCalls, errLost) }
	back := func(f *fake, _ *Monitor) { f.fail(2, allCalls, fault{}) }
	clearGPU2 := func(f *fake, m *Monitor) {
		got, err := m.Clear([]string{f.uuid(2)}, f.clk.Now())
		if err != nil || !strings.Contains(got, "GPU 2 ("+f.uuid(2)+"): ") || !strings.Contains(got, "Xid") {
			panic(fmt.Sprintf("Clear: got %q, %v", got, err))
		}
	}
	lostWant := want{status: probes.StatusProblem, reason: ReasonGPULost, message: []string{"GPU 2 ({uuid2}): is lost (fell off the bus): reading the UUID of GPU 2: ERROR_GPU_IS_LOST"}}
	type step struct {
		name string
		do   func(f *fake, m *Monitor)
		want want
	}
	tests := []struct {
		name  string
		xid   uint64
		boot  string // after the restart; "boot-1" before
		steps []step
	}{
		{name: "a reset seen in the recovery action clears a reset Xid", xid: 94, boot: "boot-1", steps: []step{
			{"restored", nil, held[94]},
			{"later", nil, held[94]},
			{"the driver asks for a reset", recovery(recoveryReset), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
				message: []string{"GPU 2 ({uuid2}): the driver's recovery action is GPU reset", "Xid 94"}}},
			{"reset done", recovery(recoveryNone), fatalOK},
		}},
		{name: "a GPU lost and back clears a reset Xid", xid: 94, boot: "boot-1", steps: []step{
			{"restored", nil, held[94]},
			{"lost", lost, lostWant},
			{"back", back, fatalOK},
		}},
		{name: "a reboot clears a reset Xid", xid: 94, boot: "boot-2", steps: []step{
			{"restored", nil, fatalOK},
		}},
		{name: "a reboot clears a reboot Xid", xid: 79, boot: "boot-2", steps: []step{
			{"restored", nil, fatalOK},
		}},
		{name: "a reboot clears once the GPU reads healthy", xid: 79, boot: "boot-2", steps: []step{
			{"GPU 2 unreadable", func(f *fake, _ *Monitor) { f.fail(2, "GetTotalEccErrors", errUnknown) }, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
				message: []string{"Xid 79", "GPU 2 ({uuid2}): reading uncorrectable ECC errors: ERROR_UNKNOWN"}}},
			{"readable", func(f *fake, _ *Monitor) { f.fail(2, "GetTotalEccErrors", fault{}) }, fatalOK},
		}},
		{name: "a reset does not clear a reboot Xid; Clear does", xid: 79, boot: "boot-1", steps: []step{
			{"restored", nil, held[79]},
			{"the driver asks for a reset", recovery(recoveryReset), held[79]},
			{"reset done", recovery(recoveryNone), held[79]},
			{"lost", lost, lostWant},
			{"back", back, held[79]},
			{"cleared", clearGPU2, fatalOK},
			{"later", nil, fatalOK},
		}},
		{name: "Clear clears a reset Xid", xid: 94, boot: "boot-1", steps: []step{
			{"restored", nil, held[94]},
			{"cleared", clearGPU2, fatalOK},
		}},
		{name: "Clear waits for the GPU to read healthy", xid: 94, boot: "boot-1", steps: []step{
			{"ECC errors", func(f *fake, _ *Monitor) { f.set(2, func(g *simGPU) { g.ecc = 2 }) }, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
				message: []string{"Xid 94", "2 volatile uncorrectable ECC errors"}}},
			{"cleared", clearGPU2, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired, message: []string{"Xid 94", "2 volatile uncorrectable ECC errors"}}},
			{"no ECC errors", func(f *fake, _ *Monitor) { f.set(2, func(g *simGPU) { g.ecc = 0 }) }, fatalOK},
		}},
		{name: "a GPU not read yet keeps its Xid", xid: 94, boot: "boot-1", steps: []step{
			// NVML still counts it: unreadable, not lost; its kept Xid holds.
			{"no handle", func(f *fake, _ *Monitor) { f.fail(2, "DeviceGetHandleByIndex", errUnknown) }, want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
				message: []string{"GPU {uuid2} (last seen as index 2", "Xid 94 (Contained memory error) at " + stamp0 + "; reset the GPU", "getting the handle of GPU 2: ERROR_UNKNOWN"},
				not:     []string{"gone from NVML"}}},
			{"handle", func(f *fake, _ *Monitor) { f.fail(2, "DeviceGetHandleByIndex", fault{}) }, held[94]},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := newFake(t)
			state := stateWith(t, before, "boot-1", held[tt.xid], before.xid(2, tt.xid))

			f := before.restarted(t)
			m := newMonitor(t, f, testConfig(), Env{BootID: bootID(tt.boot)})
			if err := m.Restore(state); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			for _, s := range tt.steps {
				if s.do != nil {
					s.do(f, m)
				}
				f.check(t, s.name, runProbe(m, NameFatal, runTimeout), s.want)
				f.clk.Step(time.Minute)
			}
		})
	}
}

func TestClear(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{})
	f.push(f.xid(2, 94), f.xid(5, 79))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"GPU 2 ({uuid2}): Xid 94", "GPU 5 ({uuid5}): Xid 79"}})

	if _, err := m.Clear([]string{"GPU-nope", f.uuid(2)}, f.clk.Now()); err == nil || !strings.Contains(err.Error(), "no GPU GPU-nope on this node (known: ") {
		t.Errorf("Clear of an unknown GPU: got error %v, want one naming it", err)
	}
	if _, err := m.Clear(nil, f.clk.Now()); err == nil {
		t.Errorf("Clear of nothing: got no error")
	}
	f.check(t, "after a failed Clear", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"Xid 94", "Xid 79"}})

	// By PCI address, as sysfs writes it.
	got, err := m.Clear([]string{f.pci(2)}, f.clk.Now())
	if err != nil || !strings.Contains(got, "GPU 2 ("+f.uuid(2)+"): dropped Xid 94 x1") {
		t.Errorf("Clear(%s): got %q, %v; want GPU 2's Xid 94 cleared", f.pci(2), got, err)
	}
	f.check(t, "GPU 2 cleared", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{"GPU 5 ({uuid5}): Xid 79"}, not: []string{"Xid 94"}})

	// An Xid after the Clear stays.
	f.clk.Step(time.Minute)
	cleared := f.clk.Now()
	f.clk.Step(time.Minute)
	f.push(f.xid(5, 48))
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"Xid 48"}})
	if got, err := m.Clear([]string{ClearAll}, cleared); err != nil || !strings.Contains(got, "GPU 5") {
		t.Errorf("Clear(all): got %q, %v", got, err)
	}
	f.check(t, "all cleared before the last Xid", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{"GPU 5 ({uuid5}): Xid 48 (Double Bit ECC Error) at 2026-03-01T12:02:00Z"}, not: []string{"Xid 79"}})
}

func TestStateRoundTrip(t *testing.T) {
	f := newFake(t)
	m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1"), GPUsOnPCI: f.pciList})
	stray := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}
	f.push(f.xid(2, 94), f.xid(2, 94), f.xid(2, 79), nvml.EventData{Device: stray, EventType: nvml.EventTypeXidCriticalError, EventData: 48})
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"Xid 94", "Xid 79", "did not identify: Xid 48"}})
	f.clk.Step(time.Minute)
	f.push(f.xid(2, 94), nvml.EventData{Device: stray, EventType: nvml.EventTypeXidCriticalError, EventData: 48})
	f.waitFor(t, m, NameFatal, want{status: probes.StatusProblem, reason: ReasonGPURebootRequired, message: []string{"Xid 94 (Contained memory error) 3 times", "Xid 48 (Double Bit ECC Error) 2 times"}})
	f.set(4, func(g *simGPU) { g.ecc = 1 })
	runProbe(m, NameFatal, runTimeout)

	state := m.State()
	if again := m.State(); !bytes.Equal(again, state) {
		t.Errorf("State twice: got\n%s\nthen\n%s", state, again)
	}
	for _, sub := range []string{`"v":2`, `"boot":"boot-1"`, `"expected":["` + f.pci(0) + `"`, f.uuid(2), f.uuid(4), `"eccEnabled":true`, `"nvlinkUp":[0,1,2,3,4,5,6,7,8,9,10,11]`} {
		if !strings.Contains(string(state), sub) {
			t.Errorf("got state %s, want it to contain %s", state, sub)
		}
	}

	m2 := newMonitor(t, f.restarted(t), testConfig(), Env{BootID: bootID("boot-1")})
	if err := m2.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := m2.State(); !bytes.Equal(got, state) {
		t.Errorf("State after Restore: got\n%s\nwant\n%s", got, state)
	}

	// A state written in another boot keeps no stray Xids nor baseline.
	m3 := newMonitor(t, f.restarted(t), testConfig(), Env{BootID: bootID("boot-2")})
	if err := m3.Restore(state); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := string(m3.State()); strings.Contains(got, `"stray"`) || strings.Contains(got, `"expected"`) {
		t.Errorf("State after Restore in another boot: got %s, want no stray Xids nor expected GPUs", got)
	}
}

// A state that cannot be used is an error naming what is wrong, and the
// Monitor starts afresh.
func TestRestoreGarbage(t *testing.T) {
	const times = `"first":"2026-03-01T12:00:00Z","last":"2026-03-01T12:00:00Z"`
	tests := []struct {
		name, state, wantErr string
	}{
		{"not JSON", `{"v":1,`, "GPU state: "},
		{"another version", `{"v":3}`, "GPU state: version 3, this selftaint reads versions 1 to 2"},
		{"no version", `{}`, "GPU state: version 0"},
		{"unknown field", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"colour":"red"}]}`, `GPU state: unknown field "gpus[0].colour"`},
		{"record without identity", `{"v":1,"gpus":[{"index":3}]}`, "GPU state: gpus[0] has neither uuid nor pci"},
		{"unknown action", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"action":"explode","count":1,` + times + `}]}]}`,
			`GPU state: gpus[0].xids[0]: unknown Xid action "explode"`},
		{"unknown action of a stray Xid", `{"v":1,"stray":[{"xid":79,"action":"explode","count":1,` + times + `}]}`,
			`GPU state: stray[0]: unknown Xid action "explode"`},
		{"no count", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"action":"reboot","count":0,` + times + `}]}]}`,
			"GPU state: gpus[0].xids[0]: count 0, want at least 1"},
		{"wrong type", `{"v":1,"gpus":[{"uuid":7,"index":0}]}`, "GPU state: "},
		{"malformed expected PCI address", `{"v":1,"expected":["0000:07:00.0","0000:0m:00.0"]}`,
			`GPU state: expected[1]: "0000:0m:00.0" is not a PCI address (domain:bus:device.function in hex`},
		{"expected PCI address without a function", `{"v":1,"expected":["0000:07:00"]}`, `GPU state: expected[0]: "0000:07:00" is not a PCI address`},
		{"PCI device above 0x1f", `{"v":1,"expected":["0000:07:20.0"]}`, `GPU state: expected[0]: "0000:07:20.0" is not a PCI address`},
		{"malformed PCI address of a record", `{"v":1,"gpus":[{"pci":"07:00.0","index":0,"eccEnabled":true}]}`,
			`GPU state: gpus[0].pci: "07:00.0" is not a PCI address`},
		{"negative index", `{"v":1,"gpus":[{"uuid":"GPU-1","index":-1,"eccEnabled":true}]}`, "GPU state: gpus[0].index: -1, want at least 0"},
		{"short count out of range", `{"v":2,"short":{"count":-1}}`, "GPU state: short.count: -1, want 0 to 1024"},
		{"short count with a malformed address", `{"v":2,"short":{"count":7,"missing":["0000:4e:00"]}}`,
			`GPU state: short.missing[0]: "0000:4e:00" is not a PCI address`},
		{"short count missing one GPU twice", `{"v":2,"short":{"count":6,"missing":["0000:4e:00.0","0000:4E:00.0"]}}`,
			"GPU state: short.missing[1]: 0000:4e:00.0 again"},
		{"short count with a GPU on the bus that is not missing", `{"v":2,"short":{"count":7,"missing":["0000:4e:00.0"],"onBus":["0000:07:00.0"]}}`,
			"GPU state: short.onBus[0]: 0000:07:00.0 is not among missing"},
		{"two records of one UUID", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"count":1,` + times + `}]},{"uuid":"GPU-1","index":0,"eccEnabled":true}]}`,
			"GPU state: gpus[1]: GPU GPU-1 again, after gpus[0]: a GPU has one record"},
		{"two records of one PCI address", `{"v":1,"gpus":[{"pci":"0000:07:00.0","index":0,"eccEnabled":true},{"pci":"0000:07:00.0","index":1,"eccEnabled":true}]}`,
			"GPU state: gpus[1]: GPU pci:0000:07:00.0 again, after gpus[0]"},
		{"two records of one Xid", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"count":1,` + times + `},{"xid":79,"count":2,` + times + `}]}]}`,
			"GPU state: gpus[0].xids[1]: Xid 79 again, after [0]: one record counts one Xid"},
		{"two stray records of one Xid and device", `{"v":1,"stray":[{"xid":79,"count":1,"uuid":"GPU-1",` + times + `},{"xid":79,"count":1,"uuid":"GPU-1",` + times + `}]}`,
			"GPU state: stray[1]: Xid 79 again, after [0]"},
		{"a kept Xid that does not fail a GPU", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":13,"action":"ignore","count":1,` + times + `}]}]}`,
			`GPU state: gpus[0].xids[0]: action "ignore" does not fail a GPU, and only Xids that do are kept`},
		{"a stray Xid that does not fail a GPU", `{"v":1,"stray":[{"xid":13,"action":"restart-app","count":1,` + times + `}]}`,
			`GPU state: stray[0]: action "restart-app" does not fail a GPU`},
		{"no first time", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"count":1}]}]}`, "GPU state: gpus[0].xids[0]: no first time"},
		{"last before first", `{"v":1,"stray":[{"xid":79,"count":2,"first":"2026-03-01T12:00:00Z","last":"2026-03-01T11:00:00Z"}]}`,
			"GPU state: stray[0]: last 2026-03-01T11:00:00Z is before first 2026-03-01T12:00:00Z"},
		{"finding of an unknown signal", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"bogus":[{"reason":"GPUNVLinkDown","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			`GPU state: gpus[0].findings.bogus: unknown signal "bogus"`},
		{"Xid events as a finding's signal", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"Xid events":[{"reason":"GPUNVLinkDown","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			`GPU state: gpus[0].findings.Xid events: unknown signal "Xid events"`},
		{"a signal without findings", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[]}}]}`, "GPU state: gpus[0].findings.NVLink: no findings"},
		{"finding without reason", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"probe":"gpu","reason":"","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			"GPU state: gpus[0].findings.NVLink[0]: no reason"},
		{"finding of an unknown reason", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"reason":"GPUsHealthy","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			`GPU state: gpus[0].findings.NVLink[0]: unknown reason "GPUsHealthy"`},
		{"finding of the wrong probe", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"probe":"gpu-degraded","reason":"GPUNVLinkDown","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			`GPU state: gpus[0].findings.NVLink[0]: probe "gpu-degraded", but reason GPUNVLinkDown is the gpu probe's`},
		{"finding of an unknown probe", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"probe":"disk","reason":"GPUNVLinkDown","text":"x","since":"2026-03-01T12:00:00Z"}]}}]}`,
			`GPU state: gpus[0].findings.NVLink[0]: probe "disk", but reason GPUNVLinkDown is the gpu probe's`},
		{"finding without text", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"reason":"GPUNVLinkDown","text":"","since":"2026-03-01T12:00:00Z"}]}}]}`,
			"GPU state: gpus[0].findings.NVLink[0]: no text"},
		{"finding without time", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[{"reason":"GPUNVLinkDown","text":"x"}]}}]}`,
			"GPU state: gpus[0].findings.NVLink[0]: no since time"},
		{"null finding", `{"v":1,"gpus":[{"uuid":"GPU-1","index":0,"findings":{"NVLink":[null]}}]}`, "GPU state: gpus[0].findings.NVLink[0]: no reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			m := newMonitor(t, f, testConfig(), Env{})
			err := m.Restore([]byte(tt.state))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Restore(%s): got error %v, want one containing %q", tt.state, err, tt.wantErr)
			}
			f.check(t, "after a failed Restore", runProbe(m, NameFatal, runTimeout), fatalOK)
		})
	}
	t.Run("nothing kept", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		if err := m.Restore(nil); err != nil {
			t.Errorf("Restore(nil): %v", err)
		}
		f.check(t, "after Restore(nil)", runProbe(m, NameFatal, runTimeout), fatalOK)
	})
	t.Run("a huge count", func(t *testing.T) {
		f := newFake(t)
		m := newMonitor(t, f, testConfig(), Env{})
		state := `{"v":1,"stray":[{"xid":79,"action":"reboot","count":4000000000,` + times + `}]}`
		done := make(chan error, 1)
		go func() { done <- m.Restore([]byte(state)) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Restore: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Restore of an Xid counted 4000000000 times has not returned after 5s")
		}
		f.check(t, "after Restore", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
			message: []string{"a GPU NVML did not identify: Xid 79"}})
	})
}

func TestAddXid(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	gi := func(n uint32) *uint32 { return &n }
	var l []xidRecord
	l = addXid(l, xidRecord{Xid: 79, Action: ActionReboot}, at(0))
	l = addXid(l, xidRecord{Xid: 79, Action: ActionReboot}, at(1))
	l = addXid(l, xidRecord{Xid: 79, Action: ActionReboot, GI: gi(1)}, at(2))
	l = addXid(l, xidRecord{Xid: 79, Action: ActionReboot, UUID: "GPU-other"}, at(3))
	if got, want := len(l), 3; got != want {
		t.Fatalf("got %d records %+v, want %d: one per Xid, MIG instance and device", got, l, want)
	}
	if r := l[0]; r.Count != 2 || !r.First.Equal(at(0)) || !r.Last.Equal(at(1)) {
		t.Errorf("got %+v, want count 2, first %v, last %v", r, at(0), at(1))
	}

	// Beyond maxXidRecords the mildest go, the oldest first.
	l = nil
	for i := range maxXidRecords {
		l = addXid(l, xidRecord{Xid: uint64(100 + i), Action: ActionIgnore}, at(i))
	}
	l = addXid(l, xidRecord{Xid: 79, Action: ActionReboot}, at(100))
	if got, want := len(l), maxXidRecords; got != want {
		t.Fatalf("got %d records, want %d", got, want)
	}
	if l[0].Xid != 101 || l[len(l)-1].Xid != 79 {
		t.Errorf("got Xids %v, want the oldest ignored one (100) dropped and 79 kept", xidNumbers(l))
	}
	for i := range maxXidRecords {
		l = addXid(l, xidRecord{Xid: uint64(200 + i), Action: ActionResetGPU}, at(200+i))
	}
	if got := xidNumbers(l); len(got) != maxXidRecords || got[0] != 79 || got[1] != 201 {
		t.Errorf("got Xids %v, want 79 (reboot) kept and the oldest reset-gpu one dropped", got)
	}
}

func xidNumbers(l []xidRecord) []uint64 {
	var out []uint64
	for _, r := range l {
		out = append(out, r.Xid)
	}
	return out
}

func TestMergeXids(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	dst := []xidRecord{{Xid: 79, Action: ActionReboot, Count: 2, First: at(5), Last: at(6)}}
	src := []xidRecord{
		{Xid: 79, Action: ActionReboot, Count: 3, First: at(1), Last: at(9)},
		{Xid: 79, Action: ActionReboot, Count: 1, First: at(2), Last: at(2), UUID: "GPU-other"},
		{Xid: 48, Action: ActionResetGPU, Count: 1, First: at(3), Last: at(3)},
	}
	got := mergeXids(dst, src)
	if len(got) != 3 {
		t.Fatalf("got %+v, want 3 records", got)
	}
	if r := got[0]; r.Count != 5 || !r.First.Equal(at(1)) || !r.Last.Equal(at(9)) {
		t.Errorf("got %+v, want count 5 from %v to %v", r, at(1), at(9))
	}
}

func TestRecoveredAndClearedXids(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// seq 0: restored from before the restart; the rest seen by this agent,
	// some under a clock that went back (Last before the marks' times).
	l := []xidRecord{
		{Xid: 94, Action: ActionResetGPU, Last: at(1)},
		{Xid: 79, Action: ActionReboot, Last: at(1)},
		{Xid: 48, Action: ActionContactSupport, Last: at(1)},
		{Xid: 95, Action: ActionResetGPU, Last: at(5)},           // restored, after the restored marks
		{Xid: 63, Action: ActionResetGPU, Last: at(-60), seq: 2}, // seen here, before the marks of seq 3
		{Xid: 64, Action: ActionResetGPU, Last: at(-50), seq: 4}, // seen here after them, under a clock set back
	}
	tests := []struct {
		name    string
		split   func([]xidRecord) ([]xidRecord, []xidRecord)
		kept    []uint64
		dropped []uint64
	}{
		{"a restored reset clears the restored reset Xids before it", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return recoveredXids(l, mark{at: at(3)}, false)
		}, []uint64{79, 48, 95, 63, 64}, []uint64{94}},
		{"a restored reboot clears the restored Xids before it", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return recoveredXids(l, mark{at: at(3)}, true)
		}, []uint64{95, 63, 64}, []uint64{94, 79, 48}},
		{"a reset seen here clears the reset Xids seen before it, whatever their times", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return recoveredXids(l, mark{at: at(-70), seq: 3}, false)
		}, []uint64{79, 48, 64}, []uint64{94, 95, 63}},
		{"a reboot seen here clears every Xid seen before it", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return recoveredXids(l, mark{at: at(-70), seq: 3}, true)
		}, []uint64{64}, []uint64{94, 79, 48, 95, 63}},
		{"a clear handled here drops what it held seen by requestedAt", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return clearedXids(l, mark{at: at(3), seq: 3})
		}, []uint64{95, 64}, []uint64{94, 79, 48, 63}},
		{"a restored clear drops the restored Xids before it", func(l []xidRecord) ([]xidRecord, []xidRecord) {
			return clearedXids(l, mark{at: at(3)})
		}, []uint64{95, 63, 64}, []uint64{94, 79, 48}},
	}
	for _, tt := range tests {
		kept, dropped := tt.split(l)
		if got, want := fmt.Sprint(xidNumbers(kept), xidNumbers(dropped)), fmt.Sprint(tt.kept, tt.dropped); got != want {
			t.Errorf("%s: got kept, dropped %s, want %s", tt.name, got, want)
		}
	}
}

// A state of version 1 (with each Xid's action and name, each finding's
// probe, each Xid's last time) restores, and is written again in the
// compact encoding of version 2.
func TestStateOlderEncoding(t *testing.T) {
	before := newFake(t)
	u, pci := before.uuid(2), before.pci(2)
	head := `"boot":"boot-1","expected":["` + pci + `"],"gpus":[{"uuid":"` + u + `","pci":"` + pci + `","index":2,`
	older := `{"v":1,` + head + `"xids":[{"xid":94,"action":"reset-gpu","name":"Contained memory error","count":1,"first":"2026-03-01T12:00:00Z","last":"2026-03-01T12:00:00Z"}],` +
		`"findings":{"uncorrectable ECC errors":[{"probe":"gpu","reason":"GPUUncorrectableECC","text":"2 volatile uncorrectable ECC errors, above 0","since":"2026-03-01T12:00:00Z"}]},"eccEnabled":true}]}`
	compact := `{"v":2,` + head + `"xids":[{"xid":94,"count":1,"first":"2026-03-01T12:00:00Z"}],` +
		`"findings":{"uncorrectable ECC errors":[{"reason":"GPUUncorrectableECC","text":"2 volatile uncorrectable ECC errors, above 0","since":"2026-03-01T12:00:00Z"}]},"eccEnabled":true}]}`
	for _, state := range []string{older, compact} {
		f := before.restarted(t)
		m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1")})
		if err := m.Restore([]byte(state)); err != nil {
			t.Fatalf("Restore(%s): %v", state, err)
		}
		if got := string(m.State()); got != compact {
			t.Errorf("State after Restore(%s):\ngot  %s\nwant %s", state, got, compact)
		}
		f.check(t, "restored", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 94 (Contained memory error) at " + stamp0 + "; reset the GPU"}})
	}
}

// A kept Xid is judged by the catalog and config of the agent that
// restores it, as a new one would be: the state does not keep its action.
func TestStateXidsJudgedAgain(t *testing.T) {
	const times = `"first":"2026-03-01T12:00:00Z"`
	before := newFake(t)
	// Written when config said 94: reboot.
	state := `{"v":1,"boot":"boot-1","gpus":[{"uuid":"` + before.uuid(2) + `","index":2,"xids":[{"xid":94,"action":"reboot","count":1,` + times + `}]}],` +
		`"stray":[{"xid":94,"action":"reboot","count":1,` + times + `}]}`
	t.Run("by the catalog", func(t *testing.T) {
		f := before.restarted(t)
		m := newMonitor(t, f, testConfig(), Env{BootID: bootID("boot-1")})
		if err := m.Restore([]byte(state)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		f.check(t, "restored", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
			message: []string{"GPU 2 ({uuid2}): Xid 94 (Contained memory error) at " + stamp0 + "; reset the GPU", "a GPU NVML did not identify: Xid 94"}})
	})
	t.Run("config now ignores it", func(t *testing.T) {
		f := before.restarted(t)
		cfg := testConfig()
		cfg.Xids = map[uint64]Action{94: ActionIgnore}
		m := newMonitor(t, f, cfg, Env{BootID: bootID("boot-1")})
		if err := m.Restore([]byte(state)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := string(m.State()); got != `{"v":2,"boot":"boot-1"}` {
			t.Errorf("State after Restore: got %s, want the Xids config now ignores gone", got)
		}
		f.check(t, "restored", runProbe(m, NameFatal, runTimeout), fatalOK)
	})
}

// Clear of a GPU not seen since the agent restarted drops, at once, what
// it held from before the request; what came after stays, and the record
// goes once it holds nothing.
func TestClearKeptRecord(t *testing.T) {
	const gone = "GPU-gone"
	state := `{"v":1,"gpus":[{"uuid":"` + gone + `","index":9,"xids":[{"xid":79,"count":1,"first":"2026-03-01T12:00:00Z"},` +
		`{"xid":48,"count":1,"first":"2026-03-01T12:05:00Z"}],"findings":{"NVLink":[{"reason":"GPUNVLinkDown",` +
		`"text":"NVLink 3 down (1 of 3 links seen up are down)","since":"2026-03-01T12:05:00Z"}]},"nvlinkUp":[0,1,3]}]}`
	f := newFake(t)
	f.clk.Step(10 * time.Minute) // restored after it was written
	m := newMonitor(t, f, testConfig(), Env{})
	if err := m.Restore([]byte(state)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	label := "GPU " + gone + " (last seen as index 9"
	f.check(t, "restored", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPURebootRequired,
		message: []string{label, "Xid 79", "Xid 48", "NVLink 3 down"}})

	got, err := m.Clear([]string{gone}, t0.Add(time.Minute))
	if want := "GPU " + gone + " (not seen since the agent restarted): dropped Xid 79 x1; kept Xid 48 x1 (last seen after requestedAt 2026-03-01T12:01:00Z)"; err != nil || !strings.Contains(got, want) {
		t.Errorf("Clear before Xid 48: got %q, %v; want it to contain %q", got, err, want)
	}
	f.check(t, "cleared before Xid 48", runProbe(m, NameFatal, runTimeout), want{status: probes.StatusProblem, reason: ReasonGPUResetRequired,
		message: []string{label, "Xid 48", "NVLink 3 down"}, not: []string{"Xid 79"}})

	got, err = m.Clear([]string{gone}, t0.Add(10*time.Minute))
	if want := "GPU " + gone + " (not seen since the agent restarted): dropped Xid 48 x1, the NVLink finding and its kept record"; err != nil || !strings.Contains(got, want) {
		t.Errorf("Clear after all: got %q, %v; want it to contain %q", got, err, want)
	}
	f.check(t, "all cleared", runProbe(m, NameFatal, runTimeout), fatalOK)
	if _, err := m.Clear([]string{gone}, t0.Add(10*time.Minute)); err == nil {
		t.Errorf("Clear of a dropped record: no error")
	}
}

// Times are kept in whole seconds: an Xid's and a finding's rounded up, a
// recovery's down, so that no restart makes a recovery cover an Xid it
// did not. Texts are bounded, derived fields left out.
func TestStateCompactEncoding(t *testing.T) {
	sub := 300 * time.Millisecond
	zone := time.FixedZone("CET", 3600)
	s := savedState{GPUs: []gpuRecord{{UUID: "GPU-1", Recovered: t0.Add(time.Minute + sub).In(zone),
		Xids: []xidRecord{
			{Xid: 79, Action: ActionReboot, Name: "GPU has fallen off the bus", Count: 2, First: t0.Add(sub), Last: t0.Add(time.Minute + sub)},
			{Xid: 94, Action: ActionResetGPU, Name: "Contained memory error", Count: 1, First: t0, Last: t0},
		},
		Findings: map[string][]finding{sigNVLink: {{Probe: NameFatal, Reason: ReasonNVLinkDown, Text: strings.Repeat("é", 100), Since: t0.Add(sub)}}},
	}}}
	want := `{"v":2,"gpus":[{"uuid":"GPU-1","index":0,"xids":[{"xid":79,"count":2,"first":"2026-03-01T12:00:01Z","last":"2026-03-01T12:01:01Z"},` +
		`{"xid":94,"count":1,"first":"2026-03-01T12:00:00Z"}],"findings":{"NVLink":[{"reason":"GPUNVLinkDown","text":"` + strings.Repeat("é", 62) + `...",` +
		`"since":"2026-03-01T12:00:01Z"}]},"recovered":"2026-03-01T12:01:00Z"}]}`
	if got := string(encodeState(s)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if s.GPUs[0].Xids[0].Action != ActionReboot || s.GPUs[0].Findings[sigNVLink][0].Probe != NameFatal {
		t.Errorf("encodeState changed the state it encoded: %+v", s)
	}
}

// Every signal a GPU is read for can hold findings in the state, and
// every reason belongs to one probe.
func TestStateKnowsEverySignal(t *testing.T) {
	for _, r := range (readSpec{}).readers() {
		if !findingSignal(r.sig) {
			t.Errorf("signal %q is read, but a state with its findings does not restore", r.sig)
		}
	}
	if !findingSignal("lost") {
		t.Errorf(`findings of "lost" do not restore`)
	}
	for _, p := range []string{NameFatal, NameDegraded} {
		for _, r := range reasonOrder(p) {
			if got := probeOf(r); got != p {
				t.Errorf("reason %s: probe %q, want %q", r, got, p)
			}
		}
	}
}

// worstDay is the state of a node of n GPUs on its worst day, and more:
// each GPU with its 16 distinct Xids (of a MIG instance with the longest
// IDs, each seen many times) and every finding a GPU can have at once,
// each of the longest text kept; 16 stray Xids from devices that said
// their UUID; times with nanoseconds, as a real clock gives.
func worstDay(n int) savedState {
	cat := DefaultCatalog()
	long := uint32(1000000000)
	at := func(m int) time.Time { return t0.Add(time.Duration(m)*time.Minute + 123456789) }
	xid := func(x uint64, m int, uuid string) xidRecord {
		info := cat.Lookup(x)
		return xidRecord{Xid: x, Action: info.Action, Name: info.Name, Count: 1000000, First: at(m), Last: at(m + 60), GI: &long, CI: &long, UUID: uuid}
	}
	text := strings.Repeat("x", 2*maxFindingText)
	s := savedState{Boot: "f0e1d2c3-b4a5-4697-8879-6a5b4c3d2e1f"}
	for i := range n {
		uuid := fmt.Sprintf("GPU-%08d-0000-4000-8000-%012d", i, i)
		pci := fmt.Sprintf("0000:%02x:00.0", 0x10+i)
		s.Expected = append(s.Expected, pci)
		g := gpuRecord{UUID: uuid, PCI: pci, Index: i, ECCEnabled: true, Recovered: at(1), Cleared: at(2), Findings: map[string][]finding{}}
		for l := range 18 {
			g.NVLinkUp = append(g.NVLinkUp, l)
		}
		// The worst Xid of each GPU is its oldest (79, reboot; 54, contact
		// support, on every other GPU); the others need a reset.
		worst := uint64(79)
		if i%2 == 1 {
			worst = 54
		}
		g.Xids = append(g.Xids, xid(worst, 0, ""))
		for j := range maxXidRecords - 1 {
			g.Xids = append(g.Xids, xid(uint64(1000+j), 10+j, ""))
		}
		add := func(sig, probe, reason string) {
			g.Findings[sig] = append(g.Findings[sig], finding{Probe: probe, Reason: reason, Text: text, Since: at(len(g.Findings))})
		}
		add("lost", NameFatal, ReasonGPULost)
		add(sigRecovery, NameFatal, ReasonGPUResetRequired)
		add(sigECC, NameFatal, ReasonUncorrectableECC)
		add(sigRemap, NameFatal, ReasonRowRemapFailure)
		add(sigRemap, NameDegraded, ReasonRowRemapPending)
		add(sigNVLink, NameFatal, ReasonNVLinkDown)
		add(sigNVLink, NameDegraded, ReasonNVLinkErrors)
		add(sigFabric, NameFatal, ReasonFabricNotReady)
		add(sigFabric, NameDegraded, ReasonFabricDegraded)
		add(sigFabric, NameDegraded, ReasonFabricDegraded)
		add(sigRetired, NameDegraded, ReasonRetiredPagesPending)
		for range 3 {
			add(sigPCIe, NameDegraded, ReasonPCIeDegraded)
		}
		add(sigECCMode, NameDegraded, ReasonECCDisabled)
		add(sigInfoROM, NameDegraded, ReasonInfoROMCorrupted)
		add(sigClocks, NameDegraded, ReasonHardwareSlowdown)
		add(sigThermal, NameDegraded, ReasonThermalViolation)
		add(sigPower, NameDegraded, ReasonPowerViolation)
		s.GPUs = append(s.GPUs, g)
		s.Stray = append(s.Stray, xid(48, i, fmt.Sprintf("GPU-%08d-1111-4000-8000-%012d", i, i)))
	}
	return s
}

// The state fits in what the agent writes for 16 GPUs on their worst day:
// what goes is the degraded findings, then the mildest, oldest Xids; the
// worst Xid of each GPU and every fatal finding stay, with their counts.
func TestStateWorstDayFits(t *testing.T) {
	for _, n := range []int{8, 16} {
		t.Run(fmt.Sprintf("%d GPUs", n), func(t *testing.T) {
			s := worstDay(n)
			state := encodeState(s)
			t.Logf("%d bytes, at most %d", len(state), maxStateLen)
			if len(state) > maxStateLen {
				t.Fatalf("state is %d bytes, above %d", len(state), maxStateLen)
			}
			f := newFake(t)
			f.clk.Step(3 * time.Hour) // restored after it was written
			m := newMonitor(t, f, testConfig(), Env{BootID: bootID(s.Boot)})
			if err := m.Restore(state); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got := m.State(); !bytes.Equal(got, state) {
				t.Errorf("State after Restore: got\n%s\nwant\n%s", got, state)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			var kept, shed int
			for _, g := range s.GPUs {
				r := m.records[g.key()]
				if r == nil {
					t.Errorf("GPU %s: its record was dropped", g.key())
					continue
				}
				if got, want := worstAction(r.Xids), worstAction(g.Xids); got != want {
					t.Errorf("GPU %s: worst Xid action %s, want %s", g.key(), got, want)
				}
				for _, x := range r.Xids {
					if x.Count != 1000000 {
						t.Errorf("GPU %s: Xid %d counted %d, want 1000000", g.key(), x.Xid, x.Count)
					}
				}
				for sig, fs := range g.Findings {
					for _, f := range fs {
						has := slices.ContainsFunc(r.Findings[sig], func(k finding) bool { return k.Reason == f.Reason })
						if f.Probe == NameFatal && !has {
							t.Errorf("GPU %s: fatal finding %s of %s dropped", g.key(), f.Reason, sig)
						}
					}
				}
				if len(r.NVLinkUp) != 18 || !r.ECCEnabled {
					t.Errorf("GPU %s: baselines dropped: %+v", g.key(), r)
				}
				kept += len(r.Xids)
				shed += len(g.Xids) - len(r.Xids)
			}
			t.Logf("%d Xid records kept, %d shed; %d stray kept", kept, shed, len(m.stray))
		})
	}
}
