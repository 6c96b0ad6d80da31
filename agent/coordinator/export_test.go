package coordinator

import "context"

// WithBeforeStart returns opts with f called whenever a decision made from
// the caches starts maintenance slots, before it is confirmed or written.
func WithBeforeStart(opts Options, f func(ctx context.Context, starts []string)) Options {
	opts.beforeStart = f
	return opts
}
