package coordinator

import (
	"testing"

	"github.com/selftaint/selftaint/agent/drain"
	tdrain "github.com/selftaint/selftaint/taints/drain"
)

// TestBlockedAll: a drain is blocked only when every pod still on the
// node is refused or left; a pod still on its way out (being evicted, or
// terminating, which may let a budget allow the next) means it is not.
func TestBlockedAll(t *testing.T) {
	refused := func(pod string) tdrain.Blocker { return tdrain.Blocker{Pod: pod, Kind: tdrain.KindPDB} }
	tests := []struct {
		name string
		r    drain.Report
		want bool
	}{
		{"nothing left", drain.Report{Drained: true}, false},
		{"all refused", drain.Report{Remaining: []string{"ns/a", "ns/b"}, Pending: 2, Blockers: []tdrain.Blocker{refused("ns/a"), refused("ns/b")}}, true},
		{"one refused, one terminating", drain.Report{Remaining: []string{"ns/a", "ns/b"}, Pending: 1, Blockers: []tdrain.Blocker{refused("ns/a")}}, false},
		{"one refused, one to evict", drain.Report{Remaining: []string{"ns/a", "ns/b"}, Pending: 2, Blockers: []tdrain.Blocker{refused("ns/a")}}, false},
		{"a pod with two blockers", drain.Report{Remaining: []string{"ns/a"}, Pending: 1, Blockers: []tdrain.Blocker{refused("ns/a"), {Pod: "ns/a", Kind: tdrain.KindEmptyDir}}}, true},
	}
	for _, tt := range tests {
		if got := blockedAll(tt.r); got != tt.want {
			t.Errorf("%s: blockedAll = %t, want %t", tt.name, got, tt.want)
		}
	}
}
