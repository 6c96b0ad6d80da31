package testcp

import (
	"context"
	"errors"
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
