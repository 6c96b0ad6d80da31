package drill

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/agent/testcp"
)

// A control plane that did not start is said in one line: for a start out
// of time, the slow component and how long each took; for a component
// that failed, which and why; and where its log is kept. Only the line
// shown to the user (Line) quotes the log; Error, which goes into the
// report and the closing table, does not.
func TestStartFailure(t *testing.T) {
	const log = "/tmp/testcp-1/kube-apiserver.log"
	timeout := func(ready []testcp.ComponentTime, component string, waited time.Duration, answer string) error {
		return fmt.Errorf("testcp: %w", &testcp.ComponentError{
			Component: component, LogPath: log, Ready: ready, Waited: waited, LastAnswer: answer,
			LogTail: "I1127 noise\nE1127 10:00:00.000000 1 x.go:1] etcd slow", LogLine: "etcd slow",
			Err: fmt.Errorf("not ready after %s: %w (30s)", waited, testcp.ErrStartTimeout),
		})
	}
	tests := []struct {
		name      string
		err       error
		want      string
		wantLog   string // what Line adds
		notInBoth []string
	}{
		{
			name:    "the component awaited was slow",
			err:     timeout([]testcp.ComponentTime{{Component: "etcd", Took: 1940 * time.Millisecond}}, "kube-apiserver", 28*time.Second, "/readyz: nothing listening yet (connection refused)"),
			want:    "the embedded control plane did not start within 30s: kube-apiserver was slow: not ready after 28s (last answer: /readyz: nothing listening yet (connection refused)); etcd ready in 1.9s; log kept: " + log,
			wantLog: "; its log says: etcd slow",
		},
		{
			name: "one before it was slow",
			err: timeout([]testcp.ComponentTime{{Component: "etcd", Took: 2 * time.Second}, {Component: "kube-apiserver", Took: 25 * time.Second}}, "kube-controller-manager", 3*time.Second,
				"/healthz: nothing listening yet (connection refused)"),
			want:    "the embedded control plane did not start within 30s: kube-apiserver was slow (ready after 25s), then kube-controller-manager not ready after 3s (last answer: /healthz: nothing listening yet (connection refused)); etcd ready in 2s; log kept: " + log,
			wantLog: "; its log says: etcd slow",
		},
		{
			name: "a component exited",
			err: fmt.Errorf("testcp: %w", &testcp.ComponentError{
				Component: "kube-apiserver", LogPath: log, Ready: []testcp.ComponentTime{{Component: "etcd", Took: time.Second}},
				LogTail: strings.Repeat("I1127 noise\n", 40) + `E1127 10:00:00.000000 1 run.go:72] "command failed" err="unknown flag: --bogus"`,
				LogLine: `"command failed" err="unknown flag: --bogus"`,
				Err:     errors.New("exited before it was ready (exit status 1)"),
			}),
			want:      "the embedded control plane did not start: kube-apiserver exited before it was ready (exit status 1); log kept: " + log,
			wantLog:   `; its log says: "command failed" err="unknown flag: --bogus"`,
			notInBoth: []string{"noise", "I1127", "\n"},
		},
		{
			name: "not a component's failure",
			err:  errors.New("testcp: writing certificates: disk full"),
			want: "the embedded control plane did not start: writing certificates: disk full",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := &StartError{Limit: 30 * time.Second, Err: tt.err}
			if got := se.Error(); got != tt.want {
				t.Errorf("Error() =\n%s\nwant\n%s", got, tt.want)
			}
			wantLine := tt.want
			if tt.wantLog != "" {
				i := strings.Index(tt.want, "; log kept: ")
				wantLine = tt.want[:i] + tt.wantLog + tt.want[i:]
			}
			if got := se.Line(); got != wantLine {
				t.Errorf("Line() =\n%s\nwant\n%s", got, wantLine)
			}
			for _, bad := range tt.notInBoth {
				if strings.Contains(se.Error(), bad) || strings.Contains(se.Line(), bad) {
					t.Errorf("the message carries %q", bad)
				}
			}
			if !errors.Is(se, tt.err) {
				t.Errorf("StartError does not wrap its cause")
			}
		})
	}
}
