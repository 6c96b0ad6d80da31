package gpu

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// hist builds a history from (seconds after t0, on, n) samples.
func hist(samples ...point) history { return history(samples) }

// p is a sample s seconds after t0.
func p(s int, on bool, n uint64) point {
	return point{at: t0.Add(time.Duration(s) * time.Second), on: on, n: n}
}

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestOnFraction(t *testing.T) {
	const win = 100 * time.Second
	tests := []struct {
		name string
		h    history
		now  time.Time
		want float64
	}{
		{"empty", nil, at(100), 0},
		{"one sample is never enough", hist(p(0, true, 0)), at(100), 0},
		{"on the whole window", hist(p(0, true, 0), p(100, false, 0)), at(100), 1},
		{"each sample counts until the next", hist(p(0, true, 0), p(30, false, 0), p(60, true, 0), p(80, false, 0)), at(100), 0.5},
		{"the last sample counts for nothing", hist(p(0, false, 0), p(90, true, 0)), at(100), 0},
		{"time before the window is not counted", hist(p(0, true, 0), p(150, false, 0)), at(200), 0.5},
		{"time after now is not counted", hist(p(0, true, 0), p(200, false, 0)), at(100), 1},
		{"time before the first sample counts as off", hist(p(80, true, 0), p(100, false, 0)), at(100), 0.2},
		{"no window", hist(p(0, true, 0), p(100, false, 0)), at(100), 0},
	}
	for _, tt := range tests {
		w := win
		if tt.name == "no window" {
			w = 0
		}
		if got := tt.h.onFraction(tt.now, w); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRise(t *testing.T) {
	const win = 100 * time.Second
	tests := []struct {
		name string
		h    history
		now  time.Time
		want uint64
	}{
		{"empty", nil, at(100), 0},
		{"one sample", hist(p(0, false, 50)), at(100), 0},
		{"rising", hist(p(0, false, 10), p(50, false, 30), p(100, false, 70)), at(100), 60},
		{"flat", hist(p(0, false, 10), p(50, false, 10), p(100, false, 10)), at(100), 0},
		{"a counter reset counts from zero", hist(p(0, false, 100), p(40, false, 150), p(60, false, 20), p(100, false, 50)), at(100), 50 + 20 + 30},
		{"from the newest sample at or before the window's start", hist(p(0, false, 0), p(50, false, 100), p(100, false, 130), p(150, false, 160)), at(150), 60},
		{"samples after now are not counted", hist(p(0, false, 0), p(50, false, 10), p(200, false, 1000)), at(100), 10},
	}
	for _, tt := range tests {
		if got := tt.h.rise(tt.now, win); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestPerMinute(t *testing.T) {
	h := hist(p(0, false, 0), p(300, false, 30), p(600, false, 60))
	tests := []struct {
		window time.Duration
		want   float64
	}{
		{10 * time.Minute, 6}, // 60 over the whole window
		{5 * time.Minute, 6},  // 30 over half of it
		{0, 0},
	}
	for _, tt := range tests {
		if got := h.perMinute(at(600), tt.window); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("perMinute over %v: got %v, want %v", tt.window, got, tt.want)
		}
	}
}

func TestHistoryAdd(t *testing.T) {
	const win = 100 * time.Second
	var h history
	for s := 0; s <= 300; s += 50 {
		h = h.add(p(s, true, uint64(s)), win)
	}
	// Kept: the base at or before 300-100=200, and what is after it.
	if got, want := fmt.Sprint(seconds(h)), "[200 250 300]"; got != want {
		t.Errorf("got samples at %s, want %s", got, want)
	}
	if got := h.rise(at(300), win); got != 100 {
		t.Errorf("got rise %d, want 100", got)
	}
	// The clock went back: start over.
	h = h.add(p(100, false, 7), win)
	if got, want := fmt.Sprint(seconds(h)), "[100]"; got != want {
		t.Errorf("after the clock went back: got samples at %s, want %s", got, want)
	}
}

func seconds(h history) []int {
	var out []int
	for _, pt := range h {
		out = append(out, int(pt.at.Sub(t0)/time.Second))
	}
	return out
}
