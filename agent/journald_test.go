package agent_test

import (
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/probes/probestest"
)

// TestJournaldLogMonitorOnTheNode runs NPD's docker-monitor.json and
// systemd-monitor.json unchanged through the agent against a real
// kube-apiserver, on a host journal written by systemd-journal-remote:
// a dockerd entry sets CorruptDockerOverlay2 on the Node and a systemd one
// records a KubeletStart Event.
func TestJournaldLogMonitorOnTheNode(t *testing.T) {
	const (
		node    = "journald"
		boot    = "5b1d3c4e-6f70-4812-9a3b-4c5d6e7f8091"
		overlay = "returned error: readlink /var/lib/docker/overlay2/l/xyz: invalid argument"
		kubelet = "Started kubelet.service - Kubernetes kubelet."
	)
	t.Parallel()
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, node, nil)

	host, _ := logmonHost(t, boot)
	journal := host.Path(filepath.Join("/var/log/journal", "0123456789abcdef0123456789abcdef", "system.journal"))
	entry := func(ident, msg string) probestest.JournalEntry {
		return probestest.JournalEntry{Time: time.Now(), BootID: boot, Identifier: ident, Message: msg}
	}
	probestest.WriteJournal(t, journal, entry("systemd", "Reached target multi-user.target - Multi-User System."))
	startAgent(t, agent.Options{NodeName: node, Client: c.CoreV1(), Probes: npdLogSpecs(t, host, "docker-monitor.json", "systemd-monitor.json")})
	waitNode(t, c, node, 30*time.Second, "CorruptDockerOverlay2 False", func(n *corev1.Node) bool {
		return conditionWas(n, "CorruptDockerOverlay2", corev1.ConditionFalse, "NoCorruptDockerOverlay2")
	})
	probestest.WriteJournal(t, journal, entry("systemd", kubelet), entry("dockerd", overlay))
	n := waitNode(t, c, node, 30*time.Second, "CorruptDockerOverlay2 True", func(n *corev1.Node) bool {
		return conditionWas(n, "CorruptDockerOverlay2", corev1.ConditionTrue, "CorruptDockerOverlay2")
	})
	if got := condition(n, "CorruptDockerOverlay2").Message; got != overlay {
		t.Errorf("CorruptDockerOverlay2 message %q, want the entry's %q", got, overlay)
	}
	waitEvent(t, c, node, "KubeletStart", 30*time.Second, kubelet)
}
