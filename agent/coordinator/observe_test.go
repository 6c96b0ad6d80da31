package coordinator

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

func testController() (*controller, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(10)
	return newController(Options{}, slog.New(slog.DiscardHandler), rec, &loopState{}), rec
}

func lease(name, uid, rv, holder string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: rv}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// describeLeases is "name@rv(holder)" for each lease, sorted.
func describeLeases(ls []*coordinationv1.Lease) []string {
	var out []string
	for _, l := range ls {
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		out = append(out, fmt.Sprintf("%s@%s(%s)", l.Name, l.ResourceVersion, h))
	}
	slices.Sort(out)
	return out
}

// TestMergeLeases: the coordinator's own writes win over a lagging
// informer, and are forgotten once it catches up; what it deleted stays
// deleted until the informer agrees, unless the informer has a new object
// of that name.
func TestMergeLeases(t *testing.T) {
	tests := []struct {
		name        string
		cached      []*coordinationv1.Lease
		written     map[string]writtenLease
		want        []string
		wantWritten []string // names still remembered afterwards
	}{
		{
			name:   "nothing written",
			cached: []*coordinationv1.Lease{lease("g-a", "u1", "5", "a")},
			want:   []string{"g-a@5(a)"},
		},
		{
			name:        "written, informer behind: the write",
			cached:      []*coordinationv1.Lease{lease("g-a", "u1", "5", "a")},
			written:     map[string]writtenLease{"g-a": {lease: lease("g-a", "u1", "7", ""), version: 7}},
			want:        []string{"g-a@7()"},
			wantWritten: []string{"g-a"},
		},
		{
			name:    "written, informer caught up: the informer's, forgotten",
			cached:  []*coordinationv1.Lease{lease("g-a", "u1", "7", "")},
			written: map[string]writtenLease{"g-a": {lease: lease("g-a", "u1", "7", ""), version: 7}},
			want:    []string{"g-a@7()"},
		},
		{
			name:    "written, informer ahead: the informer's, forgotten",
			cached:  []*coordinationv1.Lease{lease("g-a", "u1", "9", "a")},
			written: map[string]writtenLease{"g-a": {lease: lease("g-a", "u1", "7", ""), version: 7}},
			want:    []string{"g-a@9(a)"},
		},
		{
			name:        "created, not yet seen: the write",
			written:     map[string]writtenLease{"g-b": {lease: lease("g-b", "u2", "8", "b"), version: 8}},
			want:        []string{"g-b@8(b)"},
			wantWritten: []string{"g-b"},
		},
		{
			name:        "deleted, informer still has it: gone",
			cached:      []*coordinationv1.Lease{lease("g-a", "u1", "5", ""), lease("g-c", "u3", "6", "c")},
			written:     map[string]writtenLease{"g-a": {deleted: "u1"}},
			want:        []string{"g-c@6(c)"},
			wantWritten: []string{"g-a"},
		},
		{
			name:    "deleted, informer agrees: forgotten",
			written: map[string]writtenLease{"g-a": {deleted: "u1"}},
		},
		{
			name:    "deleted, informer has a new one of that name: the new one",
			cached:  []*coordinationv1.Lease{lease("g-a", "u9", "12", "a")},
			written: map[string]writtenLease{"g-a": {deleted: "u1"}},
			want:    []string{"g-a@12(a)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := testController()
			for k, v := range tt.written {
				c.written[k] = v
			}
			if got := describeLeases(c.mergeLeases(tt.cached)); !slices.Equal(got, tt.want) {
				t.Errorf("merged = %v, want %v", got, tt.want)
			}
			var remembered []string
			for k := range c.written {
				remembered = append(remembered, k)
			}
			slices.Sort(remembered)
			if !slices.Equal(remembered, tt.wantWritten) {
				t.Errorf("remembered afterwards = %v, want %v", remembered, tt.wantWritten)
			}
		})
	}
}

// TestFleetNode: how one Node looks to Decide.
func TestFleetNode(t *testing.T) {
	const cond corev1.NodeConditionType = "SelftaintX"
	since := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	req := fleet.Request{Since: since, Conditions: []corev1.NodeConditionType{cond}}
	noExecute := corev1.Taint{Key: "selftaint.io/x", Effect: corev1.TaintEffectNoExecute}
	owned := taints.FormatOwned([]taints.TaintID{taints.IDOf(noExecute)})
	tests := []struct {
		name string
		node corev1.Node
		want fleet.Node
	}{
		{
			name: "ready, zoned, asking, reporting, carrying its own NoExecute",
			node: corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{corev1.LabelTopologyZone: "z1"},
					Annotations: map[string]string{fleet.RequestAnnotation: req.Format(), taints.OwnedTaintsAnnotation: owned}},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{noExecute}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: cond, Status: corev1.ConditionTrue},
				}},
			},
			want: fleet.Node{Name: "n", Zone: "z1", Ready: true, Request: &req, Reporting: []corev1.NodeConditionType{cond}, CarriesNoExecute: true},
		},
		{
			name: "not ready, condition in an unwatched status, someone else's NoExecute",
			node: corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n"},
				Spec:       corev1.NodeSpec{Taints: []corev1.Taint{noExecute}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}, {Type: cond, Status: corev1.ConditionFalse},
				}},
			},
			want: fleet.Node{Name: "n"},
		},
		{
			name: "an unreadable ownership record: any NoExecute counts",
			node: corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{taints.OwnedTaintsAnnotation: "garbage"}},
				Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute}}},
			},
			want: fleet.Node{Name: "n", CarriesNoExecute: true},
		},
		{
			name: "an unreadable request: none",
			node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{fleet.RequestAnnotation: "{"}}},
			want: fleet.Node{Name: "n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := testController()
			c.opts.Config.Watched = map[corev1.NodeConditionType][]corev1.ConditionStatus{cond: {corev1.ConditionTrue}}
			got := c.fleetNode(&tt.node, since)
			gotReq, wantReq := got.Request, tt.want.Request
			got.Request, tt.want.Request = nil, nil
			if !reflect.DeepEqual(got, tt.want) || !sameRequest(gotReq, wantReq) {
				t.Errorf("fleetNode = %+v (request %+v), want %+v (request %+v)", got, gotReq, tt.want, wantReq)
			}
		})
	}
}

func sameRequest(a, b *fleet.Request) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Format() == b.Format()
}

// TestBadRequestToldOncePerValue: one Event per unreadable value, none
// again for the same value, one more for a new one.
func TestBadRequestToldOncePerValue(t *testing.T) {
	c, rec := testController()
	node := func(v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{fleet.RequestAnnotation: v}}}
	}
	for i, v := range []string{"bad", "bad", "worse", "worse", "bad"} {
		if got := c.fleetNode(node(v), time.Time{}).Request; got != nil {
			t.Errorf("request %d (%q) = %+v, want none", i, v, got)
		}
	}
	if got, want := len(rec.Events), 3; got != want {
		t.Errorf("%d Events, want %d (bad, worse, bad again after worse)", got, want)
	}
}

// TestAliveSeen: zero until the request changes after the node was first
// seen; then when it changed, on the coordinator's clock.
func TestAliveSeen(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	stamp := func(d time.Duration) *fleet.Request {
		a := t0.Add(d)
		return &fleet.Request{Since: t0, Conditions: []corev1.NodeConditionType{"X"}, Alive: &a}
	}
	c, _ := testController()
	steps := []struct {
		req  *fleet.Request
		now  time.Time
		want time.Time
	}{
		{stamp(0), t0.Add(time.Second), time.Time{}},                                // first sight: not a change
		{stamp(0), t0.Add(2 * time.Second), time.Time{}},                            // same value
		{stamp(20 * time.Second), t0.Add(3 * time.Second), t0.Add(3 * time.Second)}, // changed
		{stamp(20 * time.Second), t0.Add(9 * time.Second), t0.Add(3 * time.Second)}, // same
		{&fleet.Request{Since: t0, Conditions: []corev1.NodeConditionType{"X", "Y"}, Alive: stamp(20 * time.Second).Alive},
			t0.Add(11 * time.Second), t0.Add(11 * time.Second)}, // its conditions changed: written, alive
		{nil, t0.Add(12 * time.Second), t0.Add(12 * time.Second)}, // gone is a change too
	}
	for i, s := range steps {
		if got := c.aliveSeen("n", s.req, s.now); !got.Equal(s.want) {
			t.Errorf("step %d: aliveSeen = %v, want %v", i, got, s.want)
		}
	}
}

// TestGrantNode: which node a grant Lease is for.
func TestGrantNode(t *testing.T) {
	long := fmt.Sprintf("%0250d", 7)
	tests := []struct {
		lease    *coordinationv1.Lease
		byName   map[string]string
		want     string
		wantOK   bool
		describe string
	}{
		{lease(fleet.GrantName("a"), "", "", ""), map[string]string{fleet.GrantName("a"): "a"}, "a", true, "a fleet node's"},
		{lease(fleet.GrantName(long), "", "", long), nil, long, true, "a hashed name, by its holder"},
		{lease(fleet.GrantName("gone"), "", "", ""), nil, "gone", true, "a node no longer in the fleet"},
		{lease("other-lease", "", "", ""), nil, "", false, "not a grant's name"},
	}
	for _, tt := range tests {
		got, ok := grantNode(tt.lease, tt.byName)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: grantNode(%s) = %q, %v, want %q, %v", tt.describe, tt.lease.Name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestObserveFleetMembers: observe sees only the fleet's Nodes
// (Config.Members): the others are not given to Decide, and their grant
// Leases are neither counted nor released (another fleet's coordinator
// may hold them), while a grant whose Node is gone still is (to be
// released).
func TestObserveFleetMembers(t *testing.T) {
	node := func(name string, virtual bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if virtual {
			n.Labels = map[string]string{fleet.VirtualLabel: "true"}
		}
		return n
	}
	nodes := []*corev1.Node{node("real-1", false), node("real-2", false), node("vnode-1", true), node("vnode-2", true)}
	leases := []*coordinationv1.Lease{
		lease(fleet.GrantName("real-1"), "u1", "1", "real-1"),
		lease(fleet.GrantName("vnode-1"), "u2", "2", "vnode-1"),
		lease(fleet.GrantName("gone"), "u3", "3", "gone"),
	}
	for _, tt := range []struct {
		members    fleet.Membership
		wantNodes  []string
		wantGrants []string
	}{
		{"", []string{"real-1", "real-2"}, []string{"gone", "real-1"}},
		{fleet.MembersReal, []string{"real-1", "real-2"}, []string{"gone", "real-1"}},
		{fleet.MembersVirtual, []string{"vnode-1", "vnode-2"}, []string{"gone", "vnode-1"}},
		{fleet.MembersAll, []string{"real-1", "real-2", "vnode-1", "vnode-2"}, []string{"gone", "real-1", "vnode-1"}},
	} {
		c, _ := testController()
		c.opts.Config.Members = tt.members
		v := c.observe(slices.Clone(nodes), leases, time.Now())
		var gotNodes, gotGrants []string
		for _, n := range v.fleetNodes {
			gotNodes = append(gotNodes, n.Name)
		}
		for _, g := range v.grants {
			gotGrants = append(gotGrants, g.Node)
		}
		if !slices.Equal(gotNodes, tt.wantNodes) || !slices.Equal(gotGrants, tt.wantGrants) {
			t.Errorf("members %q: nodes %v grants %v, want nodes %v grants %v", tt.members, gotNodes, gotGrants, tt.wantNodes, tt.wantGrants)
		}
		// Events about the same Nodes queue a decision.
		var queued []string
		for _, n := range nodes {
			if c.member(n) {
				queued = append(queued, n.Name)
			}
		}
		if !slices.Equal(queued, tt.wantNodes) || !c.member("not a node") {
			t.Errorf("members %q: events of %v queue a decision, want %v (and anything not a Node)", tt.members, queued, tt.wantNodes)
		}
	}
}
