package main

import (
	"runtime/debug"
	"testing"

	"github.com/selftaint/selftaint/agent/metrics"
)

func TestResolveBuildInfo(t *testing.T) {
	withVCS := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	tagged := &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}
	tests := []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		want              metrics.BuildInfo
	}{
		{"stamped", "v1.2.3", "deadbeef", withVCS, metrics.BuildInfo{Version: "v1.2.3", Revision: "deadbeef", GoVersion: "go1.x"}},
		{"vcs fallback", "", "", withVCS, metrics.BuildInfo{Version: "devel", Revision: "abc123", GoVersion: "go1.x"}},
		{"module version", "", "", tagged, metrics.BuildInfo{Version: "v1.4.0", Revision: "unknown", GoVersion: "go1.x"}},
		{"nothing known", "", "", nil, metrics.BuildInfo{Version: "devel", Revision: "unknown", GoVersion: "go1.x"}},
		{"only version stamped", "v2.0.0-3-gabc-dirty", "", withVCS, metrics.BuildInfo{Version: "v2.0.0-3-gabc-dirty", Revision: "abc123", GoVersion: "go1.x"}},
	}
	for _, tt := range tests {
		if got := resolveBuildInfo(tt.version, tt.revision, tt.bi, "go1.x"); got != tt.want {
			t.Errorf("%s: resolveBuildInfo = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestDefaultMetricsAddress pins the default port the DaemonSet's named port
// and probes (deploy/monitoring_test.go) rely on.
func TestDefaultMetricsAddress(t *testing.T) {
	if defaultMetricsAddress != ":9746" {
		t.Errorf("defaultMetricsAddress = %q, want :9746 (deploy/daemonset.yaml's containerPort)", defaultMetricsAddress)
	}
}
