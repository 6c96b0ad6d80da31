package testcp

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Shared is one control plane for all the tests of a package that need no
// fresh one of their own: the first Get starts it, every later Get returns
// the same one, and Close (from the package's TestMain, after m.Run) stops
// it. Tests that share it must not stop or restart its API server and must
// keep to objects of their own (a Node name unique to the test); one that needs a pristine cluster, other component flags, or an
// API server it stops uses Start.
//
// Starting a control plane costs 3-5 s on two cores and far more under load;
// a package of fifty integration tests that each started one spent minutes
// on nothing else.
type Shared struct {
	opts Options

	mu      sync.Mutex // guards the fields below
	started bool
	cp      *ControlPlane
	err     error
}

// NewShared returns a Shared that starts a control plane with opts on the
// first Get.
func NewShared(opts Options) *Shared { return &Shared{opts: opts} }

// Get returns the shared control plane, starting it on the first call
// (within the start's limit, as Start; its progress logged to t). A
// missing binary skips t (fails it under CI=true) as Start does; a start
// that failed fails every test that asks for it, with the same error. When t
// fails, the end of each component's log is logged with it.
func (s *Shared) Get(t T) *ControlPlane {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		began := time.Now()
		opts, err := startTimeoutFromEnv(s.opts)
		if err != nil {
			s.err = err
		} else {
			if opts.Progress == nil {
				opts.Progress = func(p Progress) { t.Logf("testcp: shared control plane start: %s", p) }
			}
			s.cp, s.err = New(context.Background(), opts)
		}
		if s.err == nil {
			t.Logf("testcp: shared control plane up in %v (%s; api server %s, dir %s)", time.Since(began).Round(time.Millisecond), FormatTimes(s.cp.StartTimes), s.cp.restConfig.Host, s.cp.Dir)
		}
	}
	if s.err != nil {
		if mb := (*MissingBinaryError)(nil); errors.As(s.err, &mb) {
			skipOrFail(t, mb)
		}
		t.Fatalf("shared control plane: %s", failureReport(s.err))
	}
	cp := s.cp
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []*component{cp.etcd, cp.apiserver, cp.controllerManager, cp.scheduler} {
				if c != nil {
					t.Logf("%s", c.tailReport(logTailLines))
				}
			}
		}
	})
	return cp
}

// Close stops the shared control plane if one was started and removes its
// directory.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cp == nil {
		return nil
	}
	return s.cp.Close()
}
