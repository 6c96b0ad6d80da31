package custom

import (
	"sync"
	"time"

	"github.com/selftaint/selftaint/probes"
)

// How often a Group lets its probes report events of one reason: a burst
// of EventBurst, then one per EventEvery. It is the pace client-go's Event
// recorder allows one source on one object (NPD records each file's events
// through a recorder of its own), kept per reason, so one flapping
// temporary rule neither floods the Node's Events nor silences the
// file's other rules. The agent's recorder paces all probe events together
// on top of this (see the agent package).
const (
	EventBurst = 5
	EventEvery = 5 * time.Minute
)

// eventLimiter is a token bucket per event reason.
type eventLimiter struct {
	clock   probes.Clock
	mu      sync.Mutex         // guards buckets
	buckets map[string]*bucket // by reason; reasons come from config, so few
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// allow reports whether an event of reason may be reported now, and takes
// its token if so.
func (l *eventLimiter) allow(reason string) bool {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[reason]
	if b == nil {
		b = &bucket{tokens: EventBurst, at: now}
		l.buckets[reason] = b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(EventBurst, b.tokens+float64(d)/float64(EventEvery))
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
