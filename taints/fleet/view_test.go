package fleet

import (
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeView(t *testing.T) {
	req := Request{Since: t0, Conditions: []corev1.NodeConditionType{condA}}
	op := MaintenanceRequest{Version: MaintenanceVersion, Reason: "upgrade", RequestedBy: "alice", RequestedAt: t0}
	agent := MaintenanceRequest{Version: MaintenanceVersion, Reason: "sick", RequestedBy: "selftaint-agent", RequestedAt: t0, Conditions: []corev1.NodeConditionType{condA}}
	watched := map[corev1.NodeConditionType][]corev1.ConditionStatus{condA: {corev1.ConditionTrue}, condB: {corev1.ConditionUnknown}}
	tests := []struct {
		name       string
		node       corev1.Node
		want       Node
		wantErrsIn []string // parts of the errors, request's then maintenance's
	}{
		{
			name: "ready, zoned, asking, reporting, cordoned for a maintenance request",
			node: corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{ZoneLabel: "z1"}, Annotations: map[string]string{
					RequestAnnotation: req.Format(), OperatorRequestAnnotation: op.Format(), AgentRequestAnnotation: agent.Format(), CordonAnnotation: "operator/x",
				}},
				Spec: corev1.NodeSpec{Unschedulable: true},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
					{Type: condB, Status: corev1.ConditionUnknown}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue},
					{Type: condA, Status: corev1.ConditionTrue}, {Type: condA, Status: corev1.ConditionTrue},
				}},
			},
			want: Node{Name: "n", Zone: "z1", Ready: true, Request: &req, Reporting: []corev1.NodeConditionType{condA, condB},
				Unschedulable: true, CordonedFor: "operator/x", Maintenance: &Maintenance{Annotation: OperatorRequestAnnotation, Request: op}},
		},
		{
			name: "not ready, a condition in a status not watched, the agent's request alone",
			node: corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AgentRequestAnnotation: agent.Format()}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}, {Type: condA, Status: corev1.ConditionFalse},
				}},
			},
			want: Node{Name: "n", Maintenance: &Maintenance{Annotation: AgentRequestAnnotation, Request: agent}},
		},
		{
			name: "unreadable requests: none, each error naming its annotation; an unreadable operator's request is not replaced by the agent's",
			node: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
				RequestAnnotation: "{", OperatorRequestAnnotation: `{"version":"v1"}`, AgentRequestAnnotation: agent.Format(),
			}}},
			want:       Node{Name: "n", MaintenanceUnreadable: true},
			wantErrsIn: []string{RequestAnnotation, OperatorRequestAnnotation + ": reason: is required"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := NodeView(&tt.node, watched)
			if !sameNode(got, tt.want) {
				t.Errorf("NodeView =\n %+v\nwant\n %+v", got, tt.want)
			}
			var msgs []string
			if errs.Request != nil {
				msgs = append(msgs, errs.Request.Error())
			}
			for _, e := range errs.Maintenance {
				msgs = append(msgs, e.Error())
			}
			if len(msgs) != len(tt.wantErrsIn) {
				t.Fatalf("errors %q, want %d", msgs, len(tt.wantErrsIn))
			}
			for i, w := range tt.wantErrsIn {
				if !strings.Contains(msgs[i], w) {
					t.Errorf("error %q does not say %q", msgs[i], w)
				}
			}
		})
	}
}

// sameNode compares nodes, their requests by what they format to (a
// parsed time carries no monotonic clock reading).
func sameNode(a, b Node) bool {
	ar, br, am, bm := a.Request, b.Request, a.Maintenance, b.Maintenance
	a.Request, b.Request, a.Maintenance, b.Maintenance = nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) || (ar == nil) != (br == nil) || (am == nil) != (bm == nil) {
		return false
	}
	if ar != nil && ar.Format() != br.Format() {
		return false
	}
	return am == nil || (am.Annotation == bm.Annotation && am.Request.Format() == bm.Request.Format())
}

func TestSlotOf(t *testing.T) {
	holder := "n"
	acquired := metav1.NewMicroTime(t0.Add(time.Minute))
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: SlotName("n"), Annotations: map[string]string{
			GrantZoneAnnotation: "z", SlotRequestAnnotation: "operator/2026-03-02T10:00:00Z", SlotPhaseAnnotation: PhaseDrained,
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &acquired},
	}
	want := Slot{Node: "n", Holder: "n", Zone: "z", RequestID: "operator/2026-03-02T10:00:00Z", Phase: PhaseDrained, Acquired: acquired.Time}
	if got := SlotOf("n", l); !reflect.DeepEqual(got, want) {
		t.Errorf("SlotOf = %+v, want %+v", got, want)
	}
	l.Spec = coordinationv1.LeaseSpec{}
	if got := SlotOf("n", l); got.Holder != "" || !got.Acquired.IsZero() {
		t.Errorf("SlotOf a Lease without holder or acquire time = %+v, want them empty", got)
	}
	if node, ok := LeaseNode(l, SlotPrefix, nil); !ok || node != "n" {
		t.Errorf("LeaseNode(%s) = %q, %v, want n", l.Name, node, ok)
	}
	if _, ok := LeaseNode(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: GrantName("n")}}, SlotPrefix, nil); ok {
		t.Errorf("a grant's Lease taken for a slot's")
	}
}
