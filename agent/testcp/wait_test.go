package testcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		ok      func(calls int) (bool, error)
		wantErr string // "" for success
		wantMin int    // calls at least
	}{
		{"true at once", context.Background(), func(int) (bool, error) { return true, nil }, "", 1},
		{"true on the third call", context.Background(), func(n int) (bool, error) { return n >= 3, nil }, "", 3},
		{"never: times out with the last error", context.Background(), func(int) (bool, error) { return false, boom }, "timed out after 50ms (last error: boom)", 2},
		{"never, no error", context.Background(), func(int) (bool, error) { return false, nil }, "timed out after 50ms", 2},
		{"context done", cancelled, func(int) (bool, error) { return false, nil }, "context canceled", 1},
	}
	for _, tt := range tests {
		calls := 0
		err := Poll(tt.ctx, 50*time.Millisecond, 5*time.Millisecond, func() (bool, error) { calls++; return tt.ok(calls) })
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want success", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.wantErr)
		}
		if calls < tt.wantMin {
			t.Errorf("%s: ok called %d times, want at least %d", tt.name, calls, tt.wantMin)
		}
	}
}

func TestPortTaken(t *testing.T) {
	bind := "listen tcp 127.0.0.1:41234: bind: address already in use"
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a component's port taken", &ComponentError{Component: "kube-apiserver", LogTail: "E1127 " + bind, Err: errors.New("exited")}, true},
		{"wrapped", fmt.Errorf("testcp: %w", &ComponentError{Component: "etcd", LogTail: bind}), true},
		{"another failure", &ComponentError{Component: "kube-apiserver", LogTail: "unable to load client CA", Err: errors.New("exited")}, false},
		{"not a component's", errors.New(bind), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := portTaken(tt.err); got != tt.want {
				t.Errorf("portTaken = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEmptyDir(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"pki/ca.crt", "etcd/member/wal", "kubeconfig"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := emptyDir(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("after emptyDir: %d entries, %v; want an empty dir that still exists", len(entries), err)
	}
}
