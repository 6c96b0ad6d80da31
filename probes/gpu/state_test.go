package gpu

import (
	"bytes"
	"fmt"
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
		if err != nil || !strings.Contains(got, "GPU 2 ("+f.uuid(2)+"): Xid") {
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
	if err != nil || !strings.Contains(got, "GPU 2 ("+f.uuid(2)+"): Xid 94 x1") {
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
	for _, sub := range []string{`"v":1`, `"boot":"boot-1"`, `"expected":["` + f.pci(0) + `"`, f.uuid(2), f.uuid(4), `"eccEnabled":true`, `"nvlinkUp":[0,1,2,3,4,5,6,7,8,9,10,11]`} {
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
		{"another version", `{"v":2}`, "GPU state: version 2, this selftaint reads version 1"},
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

func TestClearXids(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	l := []xidRecord{
		{Xid: 94, Action: ActionResetGPU, Last: at(1)},
		{Xid: 79, Action: ActionReboot, Last: at(1)},
		{Xid: 48, Action: ActionContactSupport, Last: at(1)},
		{Xid: 95, Action: ActionResetGPU, Last: at(5)}, // after the recovery
	}
	tests := []struct {
		name     string
		rebooted bool
		kept     []uint64
		dropped  []uint64
	}{
		{"a reset clears what a reset fixes", false, []uint64{79, 48, 95}, []uint64{94}},
		{"a reboot clears everything before it", true, []uint64{95}, []uint64{94, 79, 48}},
	}
	for _, tt := range tests {
		kept, dropped := clearXids(l, at(3), tt.rebooted)
		if got, want := fmt.Sprint(xidNumbers(kept), xidNumbers(dropped)), fmt.Sprint(tt.kept, tt.dropped); got != want {
			t.Errorf("%s: got kept, dropped %s, want %s", tt.name, got, want)
		}
	}
}
