package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// holdString is a GuardHold as "cond scope=unhealthy/nodes", then "+new"
// when this node's change trips it, " reset<=N", and " off=a,b".
func holdString(h GuardHold) string {
	s := fmt.Sprintf("%s %s=%d/%d reset<=%d", h.Condition, h.Scope, h.State.Unhealthy, h.State.Nodes, h.ResetAt)
	if h.ByThisNode {
		s += " +new"
	}
	if len(h.Off) > 0 {
		s += " off=" + strings.Join(h.Off, ",")
	}
	return s
}

func TestProject(t *testing.T) {
	// The fleet: a budget of one, the guard at 55% (reset at or
	// below 45% for 5m), zones of three judged; nodes without a zone.
	cfg := testConfig()
	cfg.MaxNoExecute = intstr.FromInt32(1)
	cfg.RatePerMinute = 6
	cfg.Guard = GuardConfig{Threshold: 55, ResetMargin: 10, CoolDown: 5 * time.Minute, MinNodes: 3, RenewEvery: time.Hour}
	// a-1 reports A, asks, holds the grant and carries NoExecute.
	a1 := mk("a-1", "", asks(-time.Minute), reports(condA), carries, aliveSeen(0))
	a1Grant := held("a-1", "", -50*s, 0)
	faulted := func(name, zone string) Node { return mk(name, zone, asks(0), reports(condA)) }
	tests := []struct {
		name   string
		nodes  []Node
		grants []Grant
		config func(*Config)
		node   Node

		wantHolds   []string
		wantGrant   bool
		wantWaiting bool
	}{
		{
			name:  "its own condition trips the guard fleet-wide and among the nodes without a zone",
			nodes: []Node{a1, mk("b-1", ""), mk("c-1", "")}, grants: []Grant{a1Grant},
			node:        faulted("b-1", ""),
			wantHolds:   []string{"A *=2/3 reset<=1 +new off=a-1", "A =2/3 reset<=1 +new off=a-1"},
			wantWaiting: true,
		},
		{
			name:  "its condition already counted: not counted twice",
			nodes: []Node{a1, faulted("b-1", ""), mk("c-1", "")}, grants: []Grant{a1Grant},
			node:        faulted("b-1", ""),
			wantHolds:   []string{"A *=2/3 reset<=1 off=a-1", "A =2/3 reset<=1 off=a-1"},
			wantWaiting: true,
		},
		{
			name:  "a node the fleet does not list yet is added",
			nodes: []Node{a1, mk("c-1", "")}, grants: []Grant{a1Grant},
			node:        faulted("b-1", ""),
			wantHolds:   []string{"A *=2/3 reset<=1 +new off=a-1", "A =2/3 reset<=1 +new off=a-1"},
			wantWaiting: true,
		},
		{
			name:  "below the threshold: the budget keeps it waiting, no hold",
			nodes: []Node{a1, mk("b-1", ""), mk("c-1", ""), mk("d-1", ""), mk("e-1", "")}, grants: []Grant{a1Grant},
			node:        faulted("b-1", ""),
			wantWaiting: true,
		},
		{
			name:  "below the threshold with room in the budget: granted",
			nodes: []Node{a1, mk("b-1", ""), mk("c-1", ""), mk("d-1", ""), mk("e-1", "")}, grants: []Grant{a1Grant},
			config:    func(c *Config) { c.MaxNoExecute = intstr.FromInt32(2) },
			node:      faulted("b-1", ""),
			wantGrant: true,
		},
		{
			name: "its zone trips, the fleet does not",
			nodes: nodes(
				[]Node{mk("x-1", "x", asks(-time.Minute), reports(condA), carries, aliveSeen(0)), mk("x-2", "x"), mk("x-3", "x")},
				zone("y", 3, 0, condA)),
			grants:      []Grant{held("x-1", "x", -50*s, 0)},
			node:        faulted("x-2", "x"),
			wantHolds:   []string{"A x=2/3 reset<=1 +new off=x-1"},
			wantWaiting: true,
		},
		{
			name:  "the fleet trips, its small zone is not judged",
			nodes: []Node{mk("x-1", "x", reports(condA)), mk("y-1", "y"), mk("z-1", "z")},
			node:  faulted("y-1", "y"),
			// Nobody holds a grant: nothing comes off.
			wantHolds:   []string{"A *=2/3 reset<=1 +new"},
			wantWaiting: true,
		},
		{
			name:  "a node that does not ask is held by nothing",
			nodes: []Node{a1, mk("b-1", ""), mk("c-1", "")}, grants: []Grant{a1Grant},
			node: mk("b-1", "", reports(condA)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.config != nil {
				tt.config(&c)
			}
			in := Input{Config: c, Now: t0, Leader: "me", Nodes: slices.Clone(tt.nodes), Grants: tt.grants, Memory: testMemory()}
			p := Project(in, tt.node)
			var got []string
			for _, h := range p.Holds {
				got = append(got, holdString(h))
			}
			if !slices.Equal(got, tt.wantHolds) {
				t.Errorf("holds = %q, want %q", got, tt.wantHolds)
			}
			if g := slices.Contains(p.Decision.Grant, tt.node.Name); g != tt.wantGrant {
				t.Errorf("granted = %v, want %v (grant %v)", g, tt.wantGrant, p.Decision.Grant)
			}
			if w := slices.Contains(p.Decision.Waiting, tt.node.Name); w != tt.wantWaiting {
				t.Errorf("waiting = %v, want %v (waiting %v)", w, tt.wantWaiting, p.Decision.Waiting)
			}
			// The input is not changed: the fleet as it is stays as it was.
			if !slices.EqualFunc(in.Nodes, tt.nodes, func(a, b Node) bool { return a.Name == b.Name && slices.Equal(a.Reporting, b.Reporting) }) {
				t.Errorf("Project changed its input's nodes: %v", in.Nodes)
			}
		})
	}
}

func TestGuardHoldDescribe(t *testing.T) {
	base := GuardHold{Condition: condA, Scope: "", State: Scope{Tripped: true, Unhealthy: 2, Nodes: 3}, ByThisNode: true,
		Threshold: 55, ResetAt: 1, CoolDown: 5 * time.Minute, Off: []string{"a-1"}}
	tests := []struct {
		name string
		h    func(*GuardHold)
		want []string
		not  []string
	}{
		{name: "tripped by this node among the nodes without a zone", want: []string{
			"with this node's A counted, the disruption guard trips among the nodes without a zone: 2 of 3 nodes (66.67%) would report it, more than the threshold 55%",
			"no NoExecute grant and no new taint for A are made there",
			"the NoExecute taints held for it come off (a-1)",
			"it resets once at most 1 of 3 nodes report it, for 5m0s",
		}, not: []string{`zone ""`, "zone  "}},
		{name: "already tripped fleet-wide, nothing held", h: func(h *GuardHold) { h.Scope, h.ByThisNode, h.Off = FleetScope, false, nil }, want: []string{
			"the disruption guard for A is tripped fleet-wide: 2 of 3 nodes (66.67%) report it, this node counted",
		}, not: []string{"come off"}},
		{name: "a named zone", h: func(h *GuardHold) { h.Scope = "zone-a" }, want: []string{"trips in zone zone-a:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := base
			if tt.h != nil {
				tt.h(&h)
			}
			got := h.Describe()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Describe() = %q, want it to say %q", got, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(got, w) {
					t.Errorf("Describe() = %q, must not say %q", got, w)
				}
			}
		})
	}
}

func TestScopeWhere(t *testing.T) {
	for scope, want := range map[string]string{
		FleetScope: "fleet-wide",
		"":         "among the nodes without a zone",
		"zone-a":   "in zone zone-a",
	} {
		if got := ScopeWhere(scope); got != want {
			t.Errorf("ScopeWhere(%q) = %q, want %q", scope, got, want)
		}
	}
	// The guard's own Events and its Tripped sentence name the nodes
	// without a zone the same way (never an empty quoted name).
	g := GuardState{Conditions: map[corev1.NodeConditionType]map[string]Scope{condA: {"": {Tripped: true, Unhealthy: 2, Nodes: 3}}}}
	if _, why := g.Tripped(condA, ""); !strings.Contains(why, "tripped among the nodes without a zone: 2 of 3") {
		t.Errorf("Tripped(A, \"\") says %q", why)
	}
	if got := where(""); got != "among the nodes without a zone" {
		t.Errorf("where(\"\") = %q", got)
	}
}
