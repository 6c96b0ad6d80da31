package virtual

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func node(name string, uid types.UID, virtual bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, ResourceVersion: "7"}}
	if virtual {
		n.Labels = map[string]string{LabelVirtual: "true"}
	}
	return n
}

// TestDeleteNode checks which Node delete-on-exit deletes, and that the
// delete carries the UID and resourceVersion it checked as preconditions
// (the fake clientset does not enforce them: the control-plane tests in
// deploy/ run the real thing).
func TestDeleteNode(t *testing.T) {
	tests := []struct {
		name     string
		existing *corev1.Node // nil: none
		ours     types.UID
		deleted  bool
		wantErr  string // "" for nil
	}{
		{"ours and virtual", node("vn-1", "u1", true), "u1", true, ""},
		{"gone already", nil, "u1", false, ""},
		{"recreated by someone else", node("vn-1", "u2", true), "u1", false, "node vn-1 was recreated by someone else (uid u2, ours was u1)"},
		{"never registered by us", node("vn-1", "u2", true), "", false, "node vn-1 (uid u2) was never registered by this process"},
		{"label removed", node("vn-1", "u1", false), "u1", false, "node vn-1 exists and is not a virtual node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			if tt.existing != nil {
				c = fake.NewClientset(tt.existing)
			}
			var opts *metav1.DeleteOptions
			c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				o := a.(k8stesting.DeleteActionImpl).DeleteOptions
				opts = &o
				return false, nil, nil
			})
			err := deleteNode(context.Background(), c.CoreV1().Nodes(), "vn-1", tt.ours)
			if got := errString(err); !strings.Contains(got, tt.wantErr) || (tt.wantErr == "") != (err == nil) {
				t.Errorf("deleteNode = %v, want %q", err, tt.wantErr)
			}
			_, getErr := c.CoreV1().Nodes().Get(context.Background(), "vn-1", metav1.GetOptions{})
			if got := tt.existing != nil && apierrors.IsNotFound(getErr); got != tt.deleted {
				t.Errorf("deleted = %v, want %v", got, tt.deleted)
			}
			if tt.deleted {
				p := opts.Preconditions
				if p == nil || p.UID == nil || *p.UID != tt.ours || p.ResourceVersion == nil || *p.ResourceVersion != "7" {
					t.Errorf("delete preconditions %+v, want uid %s and resourceVersion 7", p, tt.ours)
				}
			} else if opts != nil {
				t.Errorf("a delete was sent (%+v), want none", opts)
			}
		})
	}
}

// TestCheckExisting checks a set with a real Node's name fails before
// anything runs, and an existing virtual node is adopted.
func TestCheckExisting(t *testing.T) {
	c := fake.NewClientset(node("vn-1", "u1", true), node("vn-2", "u2", false))
	regs, err := checkExisting(context.Background(), c.CoreV1().Nodes(), []string{"vn-1", "vn-3"})
	if err != nil {
		t.Fatalf("checkExisting(vn-1, vn-3) = %v, want nil", err)
	}
	if got, want := regs["vn-1"].get(), types.UID("u1"); got != want {
		t.Errorf("vn-1 adopted with uid %q, want %q", got, want)
	}
	if got := regs["vn-3"].get(); got != "" {
		t.Errorf("vn-3 (absent) uid %q, want none", got)
	}
	_, err = checkExisting(context.Background(), c.CoreV1().Nodes(), []string{"vn-1", "vn-2"})
	var nv *NotVirtualError
	if !errors.As(err, &nv) || nv.Node != "vn-2" {
		t.Errorf("checkExisting(vn-1, vn-2) = %v, want a NotVirtualError for vn-2", err)
	}
}

// TestGuardedNodes checks virtual-kubelet is never handed a Node that is
// not virtual, and the UID of the Node it creates is recorded.
func TestGuardedNodes(t *testing.T) {
	c := fake.NewClientset(node("real", "u0", false))
	reg := &registration{}
	g := guardedNodes{NodeInterface: c.CoreV1().Nodes(), reg: reg}
	if _, err := g.Get(context.Background(), "real", metav1.GetOptions{}); !notVirtual(err) {
		t.Errorf("Get(real) = %v, want a NotVirtualError", err)
	}
	if _, err := g.Get(context.Background(), "absent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get(absent) = %v, want NotFound (so virtual-kubelet registers it)", err)
	}
	if _, err := g.Create(context.Background(), node("vn-1", "u1", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := reg.get(), types.UID("u1"); got != want {
		t.Errorf("recorded uid %q, want %q", got, want)
	}
	if n, err := g.Get(context.Background(), "vn-1", metav1.GetOptions{}); err != nil || n.Name != "vn-1" {
		t.Errorf("Get(vn-1) = %v, %v, want the virtual node", n, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
