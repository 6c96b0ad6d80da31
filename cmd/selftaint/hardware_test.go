package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent/testkit"
)

// noNVML is config that points the agent at a libnvidia-ml that does not
// exist: the same failure as a machine without the driver, on any machine,
// GPU or not.
const noNVML = "hardware:\n  nvml:\n    libraryPath: /nonexistent/libnvidia-ml.so.1\n"

// TestAgentWithoutNVML runs the real binary without libnvidia-ml: GPU
// support is off with one log line, there is no GPU condition, and the
// agent does its job.
func TestAgentWithoutNVML(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, noNVML)
	cp := shared.Get(t)
	c := cp.Client()
	cp.CreateNode(t, "no-gpu", nil)
	var stderr testkit.LogBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SELFTAINT_TEST_RUN_MAIN=1",
		"SELFTAINT_TEST_ARGS="+strings.Join([]string{"agent", "--node-name=no-gpu", "--kubeconfig=" + cp.KubeconfigPath, "--host-root=testdata/lowmem", "--config=" + cfg, "--metrics-address=127.0.0.1:0"}, " "))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent exited with %v; stderr:\n%s", err, stderr.String())
		}
	}()
	pollNode(t, c, "no-gpu", 30*time.Second, "the pid condition", func(n *corev1.Node) bool {
		return nodeCondition(n, "SelftaintPIDPressure") != nil
	})
	time.Sleep(6 * time.Second) // past the GPU probe's 5s interval, were it running
	n := nodeNow(t, c, "no-gpu")
	for _, cond := range []corev1.NodeConditionType{"SelftaintGPUFailure", "SelftaintGPUDegraded"} {
		if got := nodeCondition(n, cond); got != nil {
			t.Errorf("condition %s = %+v on a machine without NVML, want none", cond, got)
		}
	}
	lines := 0
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "NVIDIA") || strings.Contains(l, "NVML") {
			lines++
			if !strings.Contains(l, "GPU probe and GPU inventory are off") {
				t.Errorf("log line %q does not say GPU support is off", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d log lines about NVML, want exactly one:\n%s", lines, stderr.String())
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("agent logged errors:\n%s", stderr.String())
	}
}

// TestCheckShowsHardware runs selftaint check on a fixture host with an
// FPGA: the inventory and the taint it implies are shown, and GPU support
// is reported off.
func TestCheckShowsHardware(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/lowmem")); err != nil {
		t.Fatal(err)
	}
	dev := root + "/sys/bus/pci/devices/0000:3b:00.0"
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": "0x10ee", "device": "0x5000", "class": "0x120000"} {
		if err := os.WriteFile(dev+"/"+name, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeFile(t, noNVML+"  pci:\n  - {resource: example.com/fpga, vendor: \"0x10ee\"}\n")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"check", "--host-root=" + root, "--config=" + cfg}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"GPU support: no NVIDIA driver",
		"example.com/fpga: 1 (0000:3b:00.0); selftaint would advertise, taint, label example.com/fpga.present",
		"example.com/fpga=present:NoSchedule",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}
