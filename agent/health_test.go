package agent

import (
	"strings"
	"testing"
	"time"
)

func TestCheckLive(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const stall = time.Minute
	tests := []struct {
		name    string
		state   LoopState
		wantErr string
	}{
		{"idle", LoopState{CacheSynced: true, FirstSync: true}, ""},
		{"waiting for the informer", LoopState{}, ""},
		{"sync running briefly", LoopState{SyncStarted: now.Add(-time.Second)}, ""},
		{"sync running exactly the threshold", LoopState{SyncStarted: now.Add(-stall)}, ""},
		{"sync wedged", LoopState{SyncStarted: now.Add(-stall - time.Second)}, "a sync has been running for 1m1s"},
		{"queued briefly", LoopState{QueuedSince: now.Add(-time.Second)}, ""},
		{"queued, not picked up", LoopState{QueuedSince: now.Add(-2 * stall)}, "a queued reconcile has not been picked up for 2m0s"},
		{"running long and queued briefly", LoopState{SyncStarted: now.Add(-5 * stall), QueuedSince: now.Add(-time.Second)}, "a sync has been running for 5m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLive(tt.state, now, stall)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckLive = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckLive = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckReady(t *testing.T) {
	tests := []struct {
		name    string
		state   LoopState
		wantErr string
	}{
		{"nothing yet", LoopState{}, "informer has not synced"},
		{"synced, no sync written", LoopState{CacheSynced: true}, "first sync has not been written"},
		{"ready", LoopState{CacheSynced: true, FirstSync: true}, ""},
		{"ready while a sync runs", LoopState{CacheSynced: true, FirstSync: true, SyncStarted: time.Unix(1, 0)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckReady(tt.state)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckReady = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckReady = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
