package gpu

import "time"

// A history keeps a signal's samples over a sliding window, so that a
// sustained condition (clocks held down, violation time, error counters
// rising) is judged over the window and one sample never decides.

// point is one sample: a flag and a counter, at a time.
type point struct {
	at time.Time
	on bool
	n  uint64
}

// history is a signal's samples in time order.
type history []point

// add appends p and drops what the window no longer needs: samples older
// than window before p, except the newest of them, which is the base a
// counter's rise over the window is measured from.
func (h history) add(p point, window time.Duration) history {
	if len(h) > 0 && p.at.Before(h[len(h)-1].at) {
		h = h[:0] // the clock went back: start over
	}
	h = append(h, p)
	cut := p.at.Add(-window)
	keep := 0
	for i := range h {
		if !h[i].at.After(cut) {
			keep = i
		}
	}
	return h[keep:]
}

// onFraction is the fraction of the window ending at now during which the
// flag was on: each sample counts until the next one. Time before the
// first sample counts as off, so a fresh history needs the flag on for a
// share of a whole window, not of what little was seen.
func (h history) onFraction(now time.Time, window time.Duration) float64 {
	if window <= 0 || len(h) < 2 {
		return 0
	}
	start := now.Add(-window)
	var on time.Duration
	for i := 0; i+1 < len(h); i++ {
		if !h[i].on {
			continue
		}
		from, to := h[i].at, h[i+1].at
		if from.Before(start) {
			from = start
		}
		if to.After(now) {
			to = now
		}
		if to.After(from) {
			on += to.Sub(from)
		}
	}
	return float64(on) / float64(window)
}

// rise is how much the counter rose over the window ending at now, from
// the newest sample at or before the window's start (else the oldest).
// A counter that went down was reset (the driver reloaded): the rise
// counts from zero there.
func (h history) rise(now time.Time, window time.Duration) uint64 {
	if len(h) < 2 {
		return 0
	}
	var total uint64
	for i := 0; i+1 < len(h); i++ {
		a, b := h[i], h[i+1]
		if b.at.After(now) {
			break
		}
		if !b.at.After(now.Add(-window)) {
			continue
		}
		if b.n >= a.n {
			total += b.n - a.n
		} else {
			total += b.n
		}
	}
	return total
}

// perMinute is rise over the window as a rate per minute of the whole
// window.
func (h history) perMinute(now time.Time, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(h.rise(now, window)) / window.Minutes()
}
