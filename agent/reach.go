package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/clock"
)

// retryUnreachableEvery is how often the agent's Node watch retries an API
// server it cannot reach. client-go's reflector backs off from 0.8 s to
// 30 s on failed lists and watches, so after an outage of half a minute
// the agent could take as long again to notice the server is back; the
// agent's own list and watch functions retry a connection failure every
// second instead, so the reflector never sees one and a comeback is
// noticed within a second or two. Errors the server returns (forbidden,
// too old a resourceVersion) go to the reflector as before.
const retryUnreachableEvery = time.Second

// untilReachable calls fn until it returns something other than a failure
// to reach the API server, waiting every between calls, or ctx ends. When
// fn succeeds after failing so, it calls back (the agent then syncs at
// once rather than at its retry's backoff).
func untilReachable[T any](ctx context.Context, clk clock.Clock, every time.Duration, back func(), fn func() (T, error)) (T, error) {
	failed := false
	for {
		v, err := fn()
		if err == nil && failed && back != nil {
			back()
		}
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return v, err
		}
		failed = true
		t := clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C():
		}
	}
}

// unreachable reports whether err is a failure to reach the API server
// (refused, reset, cut off, timed out) rather than an answer from it.
func unreachable(err error) bool {
	var ne net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) && ne.Timeout()
}
