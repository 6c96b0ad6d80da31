package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/selftaint/selftaint/agent/testcp"
)

// BenchmarkAgentSteadyState builds the real binary, runs `selftaint agent`
// with the default config against a real API server, and after it settles
// reports its resident memory and how many times the Node changed during a
// quiet window (the agent must not write between heartbeats).
//
//	make deps && KUBE_BIN_DIR=$PWD/bin go test -run '^$' -bench AgentSteadyState -benchtime 1x ./cmd/selftaint/
func BenchmarkAgentSteadyState(b *testing.B) {
	bin := buildAsMake(b)
	cp := testcp.Start(b, testcp.Options{})
	const node = "steady"
	cp.CreateNode(b, node, nil)

	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "agent", "--node-name="+node, "--kubeconfig="+cp.KubeconfigPath, "--log-level=warn", "--metrics-address=127.0.0.1:0")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill() })
		// Settle: first probe round (10% jitter of 10s), first writes, and
		// any damped flip (for: 30s; e.g. the network probe on a machine
		// without a CNI config).
		time.Sleep(45 * time.Second)
		n, err := cp.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		// memory, disk, pid, network and initialization; no GPU here.
		if len(n.Status.Conditions) < 5 {
			b.Fatalf("agent published %d conditions, want at least 5: %+v", len(n.Status.Conditions), n.Status.Conditions)
		}
		w, err := cp.Client().CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String(), ResourceVersion: n.ResourceVersion,
		})
		if err != nil {
			b.Fatal(err)
		}
		const quiet = 45 * time.Second
		updates := 0
		timeout := time.After(quiet)
	loop:
		for {
			select {
			case ev := <-w.ResultChan():
				if _, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified {
					updates++
				}
			case <-timeout:
				break loop
			}
		}
		w.Stop()
		mem := procMemKiB(b, cmd.Process.Pid)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b.ReportMetric(float64(mem["VmRSS"])/1024, "rss-MiB")
		b.ReportMetric(float64(mem["RssAnon"])/1024, "rss-anon-MiB")
		b.ReportMetric(float64(mem["RssFile"])/1024, "rss-file-MiB")
		b.ReportMetric(float64(mem["VmHWM"])/1024, "peak-rss-MiB")
		b.ReportMetric(float64(updates), "node-updates-in-45s")
	}
}

// procMemKiB returns the kB fields of a process's /proc/PID/status
// (VmRSS, RssAnon, RssFile, VmHWM, ...).
func procMemKiB(b testing.TB, pid int) map[string]int64 {
	st, err := procStatusKiB("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	return st
}
