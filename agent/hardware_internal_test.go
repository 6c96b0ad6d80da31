package agent

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResourceConflict(t *testing.T) {
	conflict := func(fields ...string) error {
		err := apierrors.NewApplyConflict(nil, "Apply failed")
		for _, f := range fields {
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes,
				metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Field: f, Message: `conflict with "kubelet"`})
		}
		return err
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"capacity", conflict(".status.capacity.example.com/fpga"), true},
		{"allocatable", conflict(".status.allocatable.example.com/fpga"), true},
		{"conditions only", conflict(`.status.conditions[type="SelftaintX"].status`), false},
		{"conditions and capacity", conflict(`.status.conditions[type="SelftaintX"].status`, ".status.capacity.example.com/fpga"), true},
		{"wrapped", fmt.Errorf("applying: %w", conflict(".status.capacity.example.com/fpga")), true},
		{"a plain 409", apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n", errors.New("changed")), false},
		{"not an API error", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := resourceConflict(tt.err); got != tt.want {
			t.Errorf("%s: resourceConflict(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
