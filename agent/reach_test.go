package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestUnreachable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"EOF", fmt.Errorf("get: %w", io.EOF), true},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no")), false},
		{"gone", apierrors.NewGone("too old"), false},
		{"other", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := unreachable(tt.err); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestUntilReachable(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	calls, backs := 0, 0
	fails := 3
	done := make(chan error, 1)
	go func() {
		_, err := untilReachable(context.Background(), clk, time.Second, func() { backs++ }, func() (int, error) {
			calls++
			if calls <= fails {
				return 0, syscall.ECONNREFUSED
			}
			return calls, nil
		})
		done <- err
	}()
	for i := 0; i < fails; i++ {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
	}
	if err := <-done; err != nil {
		t.Fatalf("got %v, want success after %d refusals", err, fails)
	}
	if calls != fails+1 || backs != 1 {
		t.Errorf("got %d calls and %d comebacks, want %d and 1", calls, backs, fails+1)
	}
	// An answer from the server is returned at once.
	_, err := untilReachable(context.Background(), clk, time.Second, nil, func() (int, error) { return 0, apierrors.NewGone("old") })
	if !apierrors.IsGone(err) {
		t.Errorf("got %v, want the Gone error back at once", err)
	}
	// A context that ends stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := untilReachable(ctx, clk, time.Second, nil, func() (int, error) { return 0, syscall.ECONNREFUSED }); err == nil {
		t.Error("canceled: got no error")
	}
}
