package taints

import (
	"testing"
	"time"
)

func TestEarliest(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	tests := []struct {
		name       string
		x, y, want time.Time
	}{
		{"both none", time.Time{}, time.Time{}, time.Time{}},
		{"only x", t0, time.Time{}, t0},
		{"only y", time.Time{}, t1, t1},
		{"x first", t0, t1, t0},
		{"y first", t1, t0, t0},
		{"equal", t1, t1, t1},
	}
	for _, tt := range tests {
		if got := Earliest(tt.x, tt.y); !got.Equal(tt.want) {
			t.Errorf("%s: Earliest(%v, %v) = %v, want %v", tt.name, tt.x, tt.y, got, tt.want)
		}
	}
}
