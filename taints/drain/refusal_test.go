package drain_test

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/selftaint/selftaint/taints/drain"
	"github.com/selftaint/selftaint/taints/fleet"
)

// budgetRefusal is the 429 the eviction subresource answers when a budget
// allows no disruption (as pkg/registry/core/pod/storage/eviction.go
// makes it).
func budgetRefusal(msg string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
	return err
}

func TestParseBudgetMessage(t *testing.T) {
	tests := []struct {
		msg  string
		want drain.Blocker
	}{
		{msg: "The disruption budget web-pdb needs 2 healthy pods and has 2 currently",
			want: drain.Blocker{PDB: "web-pdb", Counted: true, DesiredHealthy: 2, CurrentHealthy: 2}},
		{msg: "The disruption budget web-pdb needs 2 healthy pods and has 1 currently",
			want: drain.Blocker{PDB: "web-pdb", Counted: true, DesiredHealthy: 2, CurrentHealthy: 1}},
		{msg: "The disruption budget db needs 3 healthy pods and has 5 currently",
			want: drain.Blocker{PDB: "db", Counted: true, DesiredHealthy: 3, CurrentHealthy: 5, DisruptionsAllowed: 2}},
		{msg: "The disruption budget web-pdb is still being processed by the server.", want: drain.Blocker{PDB: "web-pdb"}},
		{msg: "The disruption budget web-pdb does not allow evicting pods currently because it failed sync: found no controllers for pod", want: drain.Blocker{PDB: "web-pdb"}},
		{msg: "The disruption budget web-pdb does not allow evicting pods currently", want: drain.Blocker{PDB: "web-pdb"}},
		{msg: "something else entirely", want: drain.Blocker{}},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			tt.want.Kind, tt.want.Message = drain.KindPDB, tt.msg
			if got := drain.ParseBudgetMessage(tt.msg); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestClassifyError(t *testing.T) {
	podGR := corev1.Resource("pods")
	const pod = "ns/p"
	throttled := apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
	multiple := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
		Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
	negative := apierrors.NewForbidden(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}, "web-pdb", errors.New("pdb disruptions allowed is negative"))
	rbac := apierrors.NewForbidden(podGR, "p", errors.New(`User "x" cannot delete resource "pods"`))
	policy := apierrors.NewForbidden(podGR, "p", errors.New(`ValidatingAdmissionPolicy 'no-evictions' with binding 'no-evictions' denied request: not today`))
	webhook := apierrors.NewForbidden(podGR, "p", errors.New(`admission webhook "guard.example.com" denied the request: not today`))
	tests := []struct {
		name string
		op   drain.Op
		err  error
		want drain.Outcome
		b    *drain.Blocker
	}{
		{name: "evicted", op: drain.OpEvict, want: drain.Evicted},
		{name: "deleted", op: drain.OpDelete, want: drain.Deleted},
		{name: "404", op: drain.OpEvict, err: apierrors.NewNotFound(podGR, "p"), want: drain.Vanished},
		{name: "409: the UID precondition failed", op: drain.OpDelete, err: apierrors.NewConflict(podGR, "p", errors.New("Precondition failed: UID in precondition: a, UID in object meta: b")), want: drain.Vanished},
		{name: "wrapped 404", op: drain.OpEvict, err: fmt.Errorf("evicting: %w", apierrors.NewNotFound(podGR, "p")), want: drain.Vanished},
		{name: "refused by a budget", op: drain.OpEvict, err: budgetRefusal("The disruption budget web-pdb needs 2 healthy pods and has 2 currently"), want: drain.Refused,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindPDB, PDB: "ns/web-pdb", Counted: true, DesiredHealthy: 2, CurrentHealthy: 2, Message: "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}},
		{name: "budget being processed", op: drain.OpEvict, err: budgetRefusal("The disruption budget web-pdb is still being processed by the server."), want: drain.Refused,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindPDB, PDB: "ns/web-pdb", Message: "The disruption budget web-pdb is still being processed by the server."}},
		{name: "429 without a budget: throttled, a failure", op: drain.OpEvict, err: throttled, want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "Too many requests, please try again later."}},
		{name: "more than one budget", op: drain.OpEvict, err: multiple, want: drain.Refused,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindPDB, Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}},
		{name: "budget broken", op: drain.OpEvict, err: negative, want: drain.Refused,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindPDB, PDB: "ns/web-pdb", Message: negative.Error()}},
		{name: "no permission to delete", op: drain.OpDelete, err: rbac, want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "no permission to delete pods (a forced drain needs RBAC pods delete: deploy/drain-force/): " + rbac.Error()}},
		{name: "no permission to evict", op: drain.OpEvict, err: rbac, want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "no permission to evict pods (RBAC pods/eviction create; for selftaint virtual: deploy/virtual/drains/): " + rbac.Error()}},
		{name: "eviction refused by an admission policy", op: drain.OpEvict, err: policy, want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "refused by admission control: " + policy.Error()}},
		{name: "deletion refused by an admission webhook", op: drain.OpDelete, err: webhook, want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "refused by admission control: " + webhook.Error()}},
		{name: "server error", op: drain.OpEvict, err: apierrors.NewInternalError(errors.New("etcd is sad")), want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "Internal error occurred: etcd is sad"}},
		{name: "not an API error", op: drain.OpEvict, err: errors.New("connection refused"), want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: "connection refused"}},
		{name: "long message is bounded", op: drain.OpEvict, err: errors.New(strings.Repeat("é", 300)), want: drain.Failed,
			b: &drain.Blocker{Pod: pod, Kind: drain.KindError, Message: strings.Repeat("é", 126) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, b := drain.ClassifyError(tt.op, pod, tt.err)
			if got != tt.want || !reflect.DeepEqual(b, tt.b) {
				t.Errorf("got %v, %+v; want %v, %+v", got, b, tt.want, tt.b)
			}
		})
	}
}

// TestPermissionHintInSummary: what a refused eviction or deletion says is
// missing, and where to get it, survives whole into the Summary the
// node's condition shows (which cuts a failure's message short), after
// the API server's long 403.
func TestPermissionHintInSummary(t *testing.T) {
	const pod = "ns/p"
	forbidden := func(verb, resource string) error {
		return apierrors.NewForbidden(corev1.Resource("pods"), "p", fmt.Errorf(
			`User "system:serviceaccount:selftaint-virtual:selftaint-virtual" cannot %s resource %q in API group "" in the namespace "ns"`, verb, resource))
	}
	for _, tt := range []struct {
		op   drain.Op
		err  error
		want string
	}{
		{drain.OpEvict, forbidden("create", "pods/eviction"), "no permission to evict pods (RBAC pods/eviction create; for selftaint virtual: deploy/virtual/drains/)"},
		{drain.OpDelete, forbidden("delete", "pods"), "no permission to delete pods (a forced drain needs RBAC pods delete: deploy/drain-force/)"},
	} {
		_, b := drain.ClassifyError(tt.op, pod, tt.err)
		if b == nil {
			t.Fatalf("%v: no blocker for %v", tt.op, tt.err)
		}
		if got := drain.Summary(fleet.Progress{Total: 1}, []string{pod}, []drain.Blocker{*b}); !strings.Contains(got, tt.want) {
			t.Errorf("%v: Summary %q, want it to hold %q", tt.op, got, tt.want)
		}
	}
}
