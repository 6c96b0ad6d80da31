package main

import (
	"testing"
	"time"
)

func TestTaintTransition(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		taints                string
		taintedAt             time.Time
		wantLanded, wantClear bool
	}{
		{"selftaint.io/memory:NoExecute", time.Time{}, true, false},
		{"selftaint.io/memory:NoExecute", at, false, false},
		{"", at, false, true},
		{"", time.Time{}, false, false},
	}
	for _, tt := range tests {
		landed, cleared := taintTransition(tt.taints, tt.taintedAt)
		if landed != tt.wantLanded || cleared != tt.wantClear {
			t.Errorf("taintTransition(%q, %v): got %v, %v, want %v, %v", tt.taints, tt.taintedAt, landed, cleared, tt.wantLanded, tt.wantClear)
		}
	}
}

func TestPodTransition(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name                  string
		st                    seen
		found, deleting       bool
		wantEvicted, wantGone bool
	}{
		{"running", seen{}, true, false, false, false},
		{"deletion begins", seen{}, true, true, true, false},
		{"still deleting", seen{deleting: at}, true, true, false, false},
		{"gone after deleting", seen{deleting: at}, false, false, false, true},
		{"gone between polls", seen{}, false, false, true, true},
	}
	for _, tt := range tests {
		evicted, gone := podTransition(tt.st, tt.found, tt.deleting)
		if evicted != tt.wantEvicted || gone != tt.wantGone {
			t.Errorf("%s: got %v, %v, want %v, %v", tt.name, evicted, gone, tt.wantEvicted, tt.wantGone)
		}
	}
}
