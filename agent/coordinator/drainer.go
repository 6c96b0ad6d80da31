package coordinator

import (
	"context"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/drain"
	tdrain "github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

// evictingDrainer is a Drainer through the Eviction API (agent/drain).
type evictingDrainer struct{ d *drain.Drainer }

// evictingDrainers makes the default NewDrainer: agent/drain with client.
func evictingDrainers(client kubernetes.Interface, log *slog.Logger) NewDrainer {
	return func(node string, req fleet.MaintenanceRequest) (Drainer, error) {
		d, err := drain.New(drain.Options{Client: client, Node: node, Request: req, Logger: log})
		if err != nil {
			return nil, err
		}
		return evictingDrainer{d}, nil
	}
}

// Pass runs one pass and says it as the coordinator writes it.
func (e evictingDrainer) Pass(ctx context.Context, force bool, evictedBefore int) (DrainPass, error) {
	r, err := e.d.Pass(ctx, force)
	if err != nil {
		return DrainPass{}, err
	}
	p := r.Progress(fleet.Progress{Evicted: evictedBefore})
	return DrainPass{
		Progress: p,
		Results:  r.Results,
		Summary:  tdrain.Summary(p, r.Remaining, r.Blockers),
		// Blocked: every pod still on the node is refused or left (none is
		// on its way: being evicted, or terminating, which may let a budget
		// allow the next).
		Blocked:  len(r.Blockers) > 0 && blockedAll(r),
		Drained:  r.Drained,
		OnlyLeft: r.OnlyLeft,
		Next:     r.Next,
	}, nil
}

// blockedAll: every pod still on the node (to evict, or terminating) has
// a blocker.
func blockedAll(r drain.Report) bool {
	pods := map[string]bool{}
	for _, b := range r.Blockers {
		pods[b.Pod] = true
	}
	for _, p := range r.Remaining {
		if !pods[p] {
			return false
		}
	}
	return len(r.Remaining) > 0
}
