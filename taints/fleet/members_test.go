package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMembershipIncludes(t *testing.T) {
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	real := node(nil)
	labelled := node(map[string]string{"team": "ml"})
	virtual := node(map[string]string{VirtualLabel: "true", "type": "virtual-kubelet"})
	notVirtual := node(map[string]string{VirtualLabel: "false"})
	oddValue := node(map[string]string{VirtualLabel: "True"})
	for _, tt := range []struct {
		name string
		m    Membership
		n    *corev1.Node
		want bool
	}{
		{"real: an unlabelled node", MembersReal, real, true},
		{"real: a node with other labels", MembersReal, labelled, true},
		{"real: a virtual node", MembersReal, virtual, false},
		{"real: virtual=false is real", MembersReal, notVirtual, true},
		{"real: only the exact value true is virtual", MembersReal, oddValue, true},
		{"default is real: a real node", "", real, true},
		{"default is real: a virtual node", "", virtual, false},
		{"virtual: a virtual node", MembersVirtual, virtual, true},
		{"virtual: a real node", MembersVirtual, real, false},
		{"virtual: virtual=false", MembersVirtual, notVirtual, false},
		{"all: a real node", MembersAll, real, true},
		{"all: a virtual node", MembersAll, virtual, true},
		{"unknown: nothing", Membership("fake"), real, false},
		{"unknown: not even a virtual node", Membership("fake"), virtual, false},
	} {
		if got := tt.m.Includes(tt.n); got != tt.want {
			t.Errorf("%s: %q.Includes(labels %v) = %v, want %v", tt.name, tt.m, tt.n.Labels, got, tt.want)
		}
	}
}

func TestParseMembership(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    Membership
		wantErr string
	}{
		{"", MembersReal, ""},
		{"real", MembersReal, ""},
		{"virtual", MembersVirtual, ""},
		{"all", MembersAll, ""},
		{"Real", "", `fleet "Real": must be one of real, virtual, all`},
		{"both", "", "must be one of real, virtual, all"},
	} {
		got, err := ParseMembership(tt.in)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ParseMembership(%q) = %v, want %q", tt.in, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParseMembership(%q) = %q, %v, want an error with %q", tt.in, got, err, tt.wantErr)
		case got != tt.want:
			t.Errorf("ParseMembership(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
