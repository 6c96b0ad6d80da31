package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/probes/gpu"
)

// TestGPUXidFault maps Xids to faults over NVIDIA's catalog and the
// config's overrides: fatal Xids give the GPU probe's condition with the
// probe's reason and message; ignore and restart-app Xids, and Xids the
// config turns off, give ErrXidNotFatal.
func TestGPUXidFault(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		config  string
		xid     uint64
		cond    corev1.NodeConditionType
		reason  string
		message string
		notFatal,
		wantErr string // a part of the error; notFatal: errors.Is ErrXidNotFatal
	}{
		{name: "79 fell off the bus", xid: 79, cond: DefaultGPUCondition, reason: "GPURebootRequired",
			message: "GPU 0: Xid 79 (GPU has fallen off the bus) at 2026-11-23T12:00:00Z; reboot the node"},
		{name: "48 double bit ECC", xid: 48, cond: DefaultGPUCondition, reason: "GPUResetRequired",
			message: "GPU 0: Xid 48 (Double Bit ECC Error) at 2026-11-23T12:00:00Z; reset the GPU"},
		{name: "63 remapping event is ignored", xid: 63, notFatal: "Xid 63 (GPU memory remapping event; none): its action is ignore, by NVIDIA's catalog"},
		{name: "64 remapping failure", xid: 64, cond: DefaultGPUCondition, reason: "GPUResetRequired",
			message: "GPU 0: Xid 64 (GPU memory remapping failure) at 2026-11-23T12:00:00Z; reset the GPU"},
		{name: "94 contained memory error", xid: 94, cond: DefaultGPUCondition, reason: "GPUResetRequired",
			message: "GPU 0: Xid 94 (Contained memory error) at 2026-11-23T12:00:00Z; reset the GPU"},
		{name: "95 uncontained memory error", xid: 95, cond: DefaultGPUCondition, reason: "GPUResetRequired",
			message: "GPU 0: Xid 95 (Uncontained memory error) at 2026-11-23T12:00:00Z; reset the GPU"},
		{name: "13 is the application's", xid: 13, notFatal: "its action is restart-app, by NVIDIA's catalog"},
		{name: "unknown Xid is fatal", xid: 99999, cond: DefaultGPUCondition, reason: "GPUResetRequired",
			message: "GPU 0: Xid 99999 (" + gpu.NameUnknown + ") at 2026-11-23T12:00:00Z; reset the GPU"},
		{name: "override turns 79 off", config: "probes:\n  gpu:\n    xids: {79: ignore}\n", xid: 79,
			notFatal: "its action is ignore, by the config"},
		{name: "skipXids turns 79 off", config: "probes:\n  gpu:\n    skipXids: [79]\n", xid: 79, notFatal: "by the config"},
		{name: "override makes 13 fatal", config: "probes:\n  gpu:\n    xids: {13: contact-support}\n", xid: 13, cond: DefaultGPUCondition,
			reason: "GPUFailure", message: "GPU 0: Xid 13 (Graphics Engine Exception) at 2026-11-23T12:00:00Z; contact NVIDIA support (the GPU may need service)"},
		{name: "GPU probe disabled", config: "probes:\n  gpu:\n    enabled: false\n", xid: 79, wantErr: "the GPU probe is disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			got, err := cfg.GPUXidFault(tt.xid, 0, at)
			switch {
			case tt.notFatal != "":
				if !errors.Is(err, ErrXidNotFatal) || !strings.Contains(err.Error(), tt.notFatal) {
					t.Fatalf("GPUXidFault(%d) error = %v, want ErrXidNotFatal saying %q", tt.xid, err, tt.notFatal)
				}
				return
			case tt.wantErr != "":
				if err == nil || errors.Is(err, ErrXidNotFatal) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("GPUXidFault(%d) error = %v, want one saying %q", tt.xid, err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("GPUXidFault(%d): %v", tt.xid, err)
			}
			if got.Target != gpu.NameFatal || got.Condition != tt.cond || got.Status != corev1.ConditionTrue {
				t.Errorf("target %q condition %q status %q, want %q %q True", got.Target, got.Condition, got.Status, gpu.NameFatal, tt.cond)
			}
			if got.Reason != tt.reason || got.Message != tt.message {
				t.Errorf("reason, message = %q, %q\nwant %q, %q", got.Reason, got.Message, tt.reason, tt.message)
			}
			if got.Info.Xid != tt.xid {
				t.Errorf("Info.Xid = %d, want %d", got.Info.Xid, tt.xid)
			}
		})
	}
}
