package logmon

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMonitorView: a monitor's View, once its source has read a FIFO
// standing in for /dev/kmsg, has the file, the lines read, the conditions
// in file order and the matches of both kinds of rule, oldest first, each
// with its rule, its kind and its lines' times; a log that cannot be opened
// is said in Err.
func TestMonitorView(t *testing.T) {
	path := fifo(t)
	mon := newMonitor(t, "kernel-monitor.json", fixtureHost(t, "boot-1"), path)
	if v := mon.View(); v.Started || v.LinesRead != 0 || v.Recent != nil {
		t.Errorf("before any probe ran: %+v, want nothing started", v)
	}
	kd := byCondition(mon.Probes())["KernelDeadlock"]
	if kd.Monitor() != mon {
		t.Fatal("the probe's Monitor is not its monitor")
	}
	watch(t, kd)
	oom := "Out of memory: Killed process 42 (stress) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
	writeKmsg(t, path, rec(1, 2*time.Second, oom), rec(2, time.Second, "eth0: link up"), rec(3, 0, hungDocker))
	deadline := time.Now().Add(30 * time.Second)
	var v View
	for v = mon.View(); v.LinesRead < 3 && time.Now().Before(deadline); v = mon.View() {
		time.Sleep(10 * time.Millisecond)
	}
	if !v.Started || v.LinesRead != 3 || v.Err != "" || v.Log != path || v.Source != "kernel-monitor" || v.Plugin != PluginKmsg ||
		!strings.HasSuffix(v.Config, "kernel-monitor.json") {
		t.Errorf("view %+v: want started, 3 lines read from %s, no error, kernel-monitor kmsg", v, path)
	}
	var types []string
	for _, c := range v.Conditions {
		types = append(types, c.Type)
	}
	if want := []string{"KernelDeadlock", "XfsShutdown", "CperHardwareErrorFatal"}; !reflect.DeepEqual(types, want) {
		t.Errorf("conditions %v, want %v", types, want)
	}
	if c := v.Conditions[0]; !c.Problem || c.Reason != "DockerHung" {
		t.Errorf("KernelDeadlock %+v, want a DockerHung problem", c)
	}
	boot := t0.Add(-uptime)
	want := []Match{
		{Reason: "OOMKilling", Lines: []Line{{Time: boot.Add(uptime - 2*time.Second), Message: oom, Seq: 1}}},
		{Reason: "TaskHung", Lines: []Line{{Time: boot.Add(uptime), Message: hungDocker, Seq: 3}}},
		{Reason: "DockerHung", Permanent: true, Condition: "KernelDeadlock", Lines: []Line{{Time: boot.Add(uptime), Message: hungDocker, Seq: 3}}},
	}
	if !reflect.DeepEqual(v.Recent, want) {
		t.Errorf("recent matches:\n got %+v\nwant %+v", v.Recent, want)
	}

}

// TestMonitorViewUnreadable: a log that cannot be opened is said in the
// view's Err.
func TestMonitorViewUnreadable(t *testing.T) {
	bad := newMonitor(t, "readonly-monitor.json", fixtureHost(t, "boot-1"), filepath.Join(t.TempDir(), "missing"))
	p := bad.Probes()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Watch(ctx, func() {}) }()
	deadline := time.Now().Add(30 * time.Second)
	var v View
	for v = bad.View(); v.Err == "" && time.Now().Before(deadline); v = bad.View() {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(v.Err, "opening the kernel log") {
		t.Errorf("a missing log: Err %q, want it to say the log could not be opened", v.Err)
	}
}
