package drain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

func TestSummary(t *testing.T) {
	web := func(pod string) drain.Blocker {
		return drain.Blocker{Pod: pod, Kind: drain.KindPDB, PDB: "ns/web-pdb", Counted: true, DesiredHealthy: 2, CurrentHealthy: 2,
			Message: "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}
	}
	db := drain.Blocker{Pod: "ns/db-0", Kind: drain.KindPDB, PDB: "ns/db", Message: "The disruption budget db is still being processed by the server."}
	multi := drain.Blocker{Pod: "ns/m", Kind: drain.KindPDB, Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}
	bare := drain.Blocker{Pod: "ns/d", Kind: drain.KindNoController}
	scratch := drain.Blocker{Pod: "ns/e", Kind: drain.KindEmptyDir}
	failed := drain.Blocker{Pod: "ns/f", Kind: drain.KindError, Message: "no permission to delete pods (a forced drain needs RBAC pods delete: deploy/drain-force/): forbidden"}
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("ns/%s%d", prefix, i)
		}
		return out
	}
	tests := []struct {
		name      string
		progress  fleet.Progress
		remaining []string
		blockers  []drain.Blocker
		want      string
	}{
		{name: "drained", progress: fleet.Progress{Evicted: 7, Total: 7}, want: "evicted 7 of 7 pods"},
		{name: "nothing yet", progress: fleet.Progress{Total: 2}, remaining: []string{"ns/a", "ns/b"}, want: "evicted 0 of 2 pods; still on the node: ns/a, ns/b"},
		{name: "the condition's example",
			progress:  fleet.Progress{Evicted: 3, Total: 7},
			remaining: []string{"ns/a", "ns/b", "ns/c", "ns/d"},
			blockers:  []drain.Blocker{bare, web("ns/c")},
			want:      "evicted 3 of 7 pods; still on the node: ns/a, ns/b; refused: ns/c by PodDisruptionBudget ns/web-pdb (disruptionsAllowed 0: needs 2 healthy, has 2); left: ns/d has no controller (evictUnreplicated not set)"},
		{name: "pods of one budget together, budgets apart, sorted",
			progress:  fleet.Progress{Evicted: 1, Total: 5},
			remaining: []string{"ns/db-0", "ns/m", "ns/web-1", "ns/web-2"},
			blockers:  []drain.Blocker{web("ns/web-2"), db, web("ns/web-1"), multi},
			want:      "evicted 1 of 5 pods; refused: ns/db-0 by PodDisruptionBudget ns/db (disruptionsAllowed 0: The disruption budget db is still being processed by the server.), ns/m: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support., ns/web-1, ns/web-2 by PodDisruptionBudget ns/web-pdb (disruptionsAllowed 0: needs 2 healthy, has 2)"},
		{name: "left and failed",
			progress:  fleet.Progress{Evicted: 2, Total: 5},
			remaining: []string{"ns/d", "ns/e", "ns/f"},
			blockers:  []drain.Blocker{scratch, failed, bare},
			want:      "evicted 2 of 5 pods; left: ns/d has no controller (evictUnreplicated not set), ns/e has emptyDir data (deleteEmptyDirData not set); failed: ns/f: no permission to delete pods (a forced drain needs RBAC pods delete: deploy/drain-force/): forbidden"},
		{name: "a pod with two reasons is named for each",
			progress:  fleet.Progress{Total: 1},
			remaining: []string{"ns/d"},
			blockers:  []drain.Blocker{{Pod: "ns/d", Kind: drain.KindNoController}, {Pod: "ns/d", Kind: drain.KindEmptyDir}},
			want:      "evicted 0 of 1 pods; left: ns/d has no controller (evictUnreplicated not set), ns/d has emptyDir data (deleteEmptyDirData not set)"},
		{name: "many remaining: named up to five",
			progress:  fleet.Progress{Evicted: 0, Total: 12},
			remaining: names("p", 12),
			want:      "evicted 0 of 12 pods; still on the node: ns/p0, ns/p1, ns/p2, ns/p3, ns/p4 (+7 more)"},
		{name: "many refused by one budget, many budgets",
			progress:  fleet.Progress{Total: 9},
			remaining: append(names("w", 6), "ns/x", "ns/y", "ns/z"),
			blockers: func() []drain.Blocker {
				var bs []drain.Blocker
				for _, p := range names("w", 6) {
					bs = append(bs, web(p))
				}
				for _, p := range []string{"x", "y", "z"} {
					bs = append(bs, drain.Blocker{Pod: "ns/" + p, Kind: drain.KindPDB, PDB: "ns/pdb-" + p, Counted: true, DesiredHealthy: 1, CurrentHealthy: 1})
				}
				return bs
			}(),
			want: "evicted 0 of 9 pods; refused: ns/w0, ns/w1, ns/w2, ns/w3, ns/w4 (+1 more) by PodDisruptionBudget ns/web-pdb (disruptionsAllowed 0: needs 2 healthy, has 2), " +
				"ns/x by PodDisruptionBudget ns/pdb-x (disruptionsAllowed 0: needs 1 healthy, has 1), ns/y by PodDisruptionBudget ns/pdb-y (disruptionsAllowed 0: needs 1 healthy, has 1) (+1 more budgets)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := drain.Summary(tt.progress, tt.remaining, tt.blockers); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestSummaryBounded: whatever the names and messages, the summary stays
// within MaxSummary bytes and valid UTF-8, and a long name is cut.
func TestSummaryBounded(t *testing.T) {
	long := "ns/" + strings.Repeat("ü", 200)
	var blockers []drain.Blocker
	var remaining []string
	for i := range 50 {
		p := fmt.Sprintf("%s-%d", long, i)
		remaining = append(remaining, p, fmt.Sprintf("ns/other-%s-%d", strings.Repeat("x", 250), i))
		blockers = append(blockers,
			drain.Blocker{Pod: p, Kind: drain.KindPDB, PDB: fmt.Sprintf("ns/%s-%d", strings.Repeat("b", 250), i), Message: strings.Repeat("m", 500)},
			drain.Blocker{Pod: p, Kind: drain.KindError, Message: strings.Repeat("é", 500)},
			drain.Blocker{Pod: p, Kind: drain.KindEmptyDir})
	}
	got := drain.Summary(fleet.Progress{Evicted: 1, Total: 101}, remaining, blockers)
	if len(got) > drain.MaxSummary {
		t.Errorf("summary is %d bytes, more than %d", len(got), drain.MaxSummary)
	}
	if !strings.HasPrefix(got, "evicted 1 of 101 pods; still on the node: ns/other-") || !strings.HasSuffix(got, "…") {
		t.Errorf("got %q", got)
	}
	if !strings.Contains(got, "x…, ns/other") {
		t.Errorf("a long name is not cut: %q", got)
	}
	if strings.ToValidUTF8(got, "?") != got {
		t.Errorf("not valid UTF-8: %q", got)
	}
}
