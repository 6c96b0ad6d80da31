package drill

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/selftaint/selftaint/agent/testcp"
)

// fakeCoordinator writes a script that stands for the selftaint binary: it
// ignores its arguments and runs body.
func fakeCoordinator(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "selftaint")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testCoordinators(t *testing.T, bin string) (*coordinators, func() []string) {
	var mu sync.Mutex
	var said []string
	c := &coordinators{
		bin: bin, logDir: t.TempDir(), prefix: "test-coordinator-", procs: map[string]*coordProc{},
		say: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			said = append(said, fmt.Sprintf(format, args...))
		},
	}
	t.Cleanup(func() { c.stopAll() })
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), said...)
	}
}

func (c *coordinators) started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// TestCoordinatorRestartedAfterExit: a replica that exits by itself (as
// one that lost its leadership does) is started again, as its Deployment
// would; none starts once stopAll has begun.
func TestCoordinatorRestartedAfterExit(t *testing.T) {
	c, said := testCoordinators(t, fakeCoordinator(t, "exit 1"))
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	err := testcp.Poll(t.Context(), 30*time.Second, 50*time.Millisecond, func() (bool, error) { return c.started() >= 3, nil })
	if err != nil {
		t.Fatalf("%d replicas started, want a first and two restarts: %v; the view said %q", c.started(), err, said())
	}
	c.stopAll()
	n := c.started()
	time.Sleep(2 * coordRestartDelay)
	if got := c.started(); got != n {
		t.Errorf("%d replicas started after stopAll began, want none", got-n)
	}
	if s := said(); len(s) == 0 {
		t.Errorf("the view was not told that a replica exited")
	}
}

// TestCoordinatorKilledNotRestarted: a replica a kill step killed stays
// dead (a kill step's For restarts one, not the exit).
func TestCoordinatorKilledNotRestarted(t *testing.T) {
	c, said := testCoordinators(t, fakeCoordinator(t, "exec sleep 60"))
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	var p *coordProc
	for _, q := range c.procs {
		p = q
	}
	c.mu.Unlock()
	c.kill(p)
	time.Sleep(2 * coordRestartDelay)
	if got := c.started(); got != 1 {
		t.Errorf("%d replicas started, want only the killed one; the view said %q", got, said())
	}
}
