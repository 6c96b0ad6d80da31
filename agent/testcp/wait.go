package testcp

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PollInterval is how often Poll and WaitNode look again.
const PollInterval = 20 * time.Millisecond

// Poll calls ok every interval until it returns true, and returns nil; or
// an error once timeout has passed (with ok's last error) or ctx is done.
// It is the one polling loop the tests and the demo share.
func Poll(ctx context.Context, timeout, interval time.Duration, ok func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := ok()
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("timed out after %s (last error: %w)", timeout, err)
			}
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitNode polls Node name until ok holds, and returns it and when ok
// first held. On timeout it returns the last Node it read (nil if none)
// with the error, for the caller to describe.
func WaitNode(ctx context.Context, c kubernetes.Interface, name string, timeout time.Duration, ok func(*corev1.Node) bool) (*corev1.Node, time.Time, error) {
	var last *corev1.Node
	var at time.Time
	err := Poll(ctx, timeout, PollInterval, func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		if ok(n) {
			at = time.Now()
			return true, nil
		}
		return false, nil
	})
	return last, at, err
}
