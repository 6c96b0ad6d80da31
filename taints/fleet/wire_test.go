package fleet

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestRequestFormat(t *testing.T) {
	alive := time.Date(2026, 3, 2, 11, 0, 0, 999_000_000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		r    Request
		want string
	}{
		{
			name: "sorted, deduplicated, UTC, whole seconds",
			r: Request{
				Since:      time.Date(2026, 3, 2, 10, 0, 0, 500_000_000, time.UTC),
				Conditions: []corev1.NodeConditionType{"B", "A", "B"},
			},
			want: `{"since":"2026-03-02T10:00:00Z","conditions":["A","B"]}`,
		},
		{
			name: "with a liveness stamp",
			r:    Request{Since: t0, Conditions: []corev1.NodeConditionType{"A"}, Alive: &alive},
			want: `{"since":"2026-03-02T10:00:00Z","conditions":["A"],"alive":"2026-03-02T10:00:00Z"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds := slices.Clone(tc.r.Conditions)
			aliveBefore := tc.r.Alive
			if got := tc.r.Format(); got != tc.want {
				t.Errorf("Format: got %s, want %s", got, tc.want)
			}
			if !slices.Equal(tc.r.Conditions, conds) || tc.r.Alive != aliveBefore {
				t.Errorf("Format changed its receiver's conditions or alive: %v", tc.r)
			}
		})
	}
}

func TestRequestRoundTrip(t *testing.T) {
	alive := t0.Add(90 * time.Second)
	for _, r := range []Request{
		{Since: t0, Conditions: []corev1.NodeConditionType{"A"}},
		{Since: t0, Conditions: []corev1.NodeConditionType{"A", "B"}, Alive: &alive},
	} {
		got, err := ParseRequest(r.Format())
		if err != nil {
			t.Fatalf("ParseRequest(%s): %v", r.Format(), err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "not JSON", in: `since`, want: RequestAnnotation},
		{name: "an unknown field", in: `{"since":"2026-03-02T10:00:00Z","conditions":["A"],"sinse":"x"}`, want: "sinse"},
		{name: "a duplicate field", in: `{"since":"2026-03-02T10:00:00Z","since":"2026-03-02T10:00:00Z","conditions":["A"]}`, want: "since"},
		{name: "no since", in: `{"conditions":["A"]}`, want: "since is required"},
		{name: "no conditions", in: `{"since":"2026-03-02T10:00:00Z"}`, want: "at least one condition"},
		{name: "empty conditions", in: `{"since":"2026-03-02T10:00:00Z","conditions":[]}`, want: "at least one condition"},
		{name: "an empty condition", in: `{"since":"2026-03-02T10:00:00Z","conditions":["A",""]}`, want: "conditions[1] is empty"},
		{name: "a bad time", in: `{"since":"yesterday","conditions":["A"]}`, want: RequestAnnotation},
		{name: "trailing data", in: `{"since":"2026-03-02T10:00:00Z","conditions":["A"]} {}`, want: RequestAnnotation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.in)
			if err == nil {
				t.Fatalf("ParseRequest(%s): got %+v, want an error", tc.in, r)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), RequestAnnotation) {
				t.Errorf("ParseRequest(%s): got %q, want it to start with the annotation and say %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestGrantName(t *testing.T) {
	long := strings.Repeat("n", 300)
	longer := long + "x"
	fits := strings.Repeat("m", maxName-len(GrantPrefix))
	tests := []struct {
		name, node, want string
		wantLen          int
	}{
		{name: "short", node: "node-1", want: GrantPrefix + "node-1"},
		{name: "exactly the limit", node: fits, want: GrantPrefix + fits},
		{name: "too long: hashed", node: long, wantLen: maxName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := GrantName(tc.node)
			if tc.want != "" && got != tc.want {
				t.Errorf("GrantName: got %q, want %q", got, tc.want)
			}
			if len(got) > maxName {
				t.Errorf("GrantName: %d characters, more than %d", len(got), maxName)
			}
			if tc.wantLen != 0 && len(got) != tc.wantLen {
				t.Errorf("GrantName: got %d characters, want %d", len(got), tc.wantLen)
			}
			if !strings.HasPrefix(got, GrantPrefix) {
				t.Errorf("GrantName: got %q, want the prefix %q", got, GrantPrefix)
			}
		})
	}
	if a, b := GrantName(long), GrantName(longer); a == b {
		t.Errorf("two long names with one prefix share the grant %q", a)
	}
	if got, want := GrantName(fits+"m"), GrantName(fits+"m"); got != want {
		t.Errorf("GrantName is not stable: %q, %q", got, want)
	}
}

func TestNewGrant(t *testing.T) {
	l := NewGrant("ns", "node-1", "zone-a", 90*time.Second, t0)
	if got, want := l.Name, GrantPrefix+"node-1"; got != want {
		t.Errorf("Name: got %q, want %q", got, want)
	}
	if got, want := l.Namespace, "ns"; got != want {
		t.Errorf("Namespace: got %q, want %q", got, want)
	}
	if got := l.Labels[GrantLabel]; got != "true" {
		t.Errorf("label %s: got %q, want true", GrantLabel, got)
	}
	if got := l.Annotations[GrantZoneAnnotation]; got != "zone-a" {
		t.Errorf("annotation %s: got %q, want zone-a", GrantZoneAnnotation, got)
	}
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity != "node-1" {
		t.Errorf("holder: got %v, want node-1", sp.HolderIdentity)
	}
	if sp.LeaseDurationSeconds == nil || *sp.LeaseDurationSeconds != 90 {
		t.Errorf("duration: got %v, want 90", sp.LeaseDurationSeconds)
	}
	if sp.AcquireTime == nil || !sp.AcquireTime.Time.Equal(t0) || sp.RenewTime == nil || !sp.RenewTime.Time.Equal(t0) {
		t.Errorf("acquire/renew: got %v/%v, want %v", sp.AcquireTime, sp.RenewTime, t0)
	}
	if ok, until := Granted(l, "node-1", time.Time{}, t0); !ok || !until.Equal(t0.Add(90*time.Second)) {
		t.Errorf("Granted(new grant): got %v until %v, want true until %v", ok, until, t0.Add(90*time.Second))
	}
}

func TestGranted(t *testing.T) {
	lease := func(mod func(*coordinationv1.LeaseSpec)) *coordinationv1.Lease {
		l := NewGrant("ns", "n", "x", time.Minute, t0)
		mod(&l.Spec)
		return l
	}
	same := func(*coordinationv1.LeaseSpec) {}
	tests := []struct {
		name      string
		lease     *coordinationv1.Lease
		node      string
		observed  time.Duration // nothing: zero
		now       time.Duration
		want      bool
		wantUntil time.Duration // nothing: zero
	}{
		{name: "no lease", lease: nil, node: "n", observed: nothing, want: false, wantUntil: nothing},
		{name: "live", lease: lease(same), node: "n", observed: nothing, now: 59 * s, want: true, wantUntil: 60 * s},
		{name: "ends at renew + TTL", lease: lease(same), node: "n", observed: nothing, now: 60 * s, want: false, wantUntil: 60 * s},
		{name: "another node's", lease: lease(same), node: "m", observed: nothing, want: false, wantUntil: nothing},
		{name: "released", lease: lease(func(sp *coordinationv1.LeaseSpec) { sp.HolderIdentity = nil }), node: "n", observed: nothing, wantUntil: nothing},
		{name: "released to the empty holder", lease: lease(func(sp *coordinationv1.LeaseSpec) { e := ""; sp.HolderIdentity = &e }), node: "", observed: nothing, wantUntil: nothing},
		{name: "no renew time", lease: lease(func(sp *coordinationv1.LeaseSpec) { sp.RenewTime = nil }), node: "n", observed: nothing, wantUntil: nothing},
		{name: "no duration", lease: lease(func(sp *coordinationv1.LeaseSpec) { sp.LeaseDurationSeconds = nil }), node: "n", observed: nothing, wantUntil: nothing},
		{name: "a zero duration", lease: lease(func(sp *coordinationv1.LeaseSpec) { z := int32(0); sp.LeaseDurationSeconds = &z }), node: "n", observed: nothing, wantUntil: nothing},
		{
			name:  "seen before its renew time (coordinator clock ahead): from when seen",
			lease: lease(same), node: "n", observed: -30 * s, now: 29 * s, want: true, wantUntil: 30 * s,
		},
		{
			name:  "seen before its renew time, expired by the reader's clock",
			lease: lease(same), node: "n", observed: -30 * s, now: 30 * s, want: false, wantUntil: 30 * s,
		},
		{
			name:  "seen after its renew time: from the renew time",
			lease: lease(same), node: "n", observed: 50 * s, now: 59 * s, want: true, wantUntil: 60 * s,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var observed time.Time
			if tc.observed != nothing {
				observed = at(tc.observed)
			}
			got, until := Granted(tc.lease, tc.node, observed, at(tc.now))
			if got != tc.want {
				t.Errorf("granted: got %v, want %v", got, tc.want)
			}
			gotUntil := nothing
			if !until.IsZero() {
				gotUntil = until.Sub(t0)
			}
			if gotUntil != tc.wantUntil {
				t.Errorf("until: got %v, want %v", gotUntil, tc.wantUntil)
			}
		})
	}
}

func TestGuardStateTripped(t *testing.T) {
	g := GuardState{Conditions: map[corev1.NodeConditionType]map[string]Scope{
		"A": {FleetScope: {Tripped: true, Since: t0, Unhealthy: 7, Nodes: 12}},
		"B": {"x": {Tripped: true, Since: t0, Unhealthy: 3, Nodes: 4}, "y": {Unhealthy: 1, Nodes: 4}},
	}}
	tests := []struct {
		cond     corev1.NodeConditionType
		zone     string
		want     bool
		wantSays []string
	}{
		{cond: "A", zone: "x", want: true, wantSays: []string{"A", "fleet-wide", "7 of 12", "2026-03-02T10:00:00Z"}},
		{cond: "A", zone: "", want: true, wantSays: []string{"fleet-wide"}},
		{cond: "B", zone: "x", want: true, wantSays: []string{"B", `zone "x"`, "3 of 4"}},
		{cond: "B", zone: "y", want: false},
		{cond: "B", zone: "z", want: false},
		{cond: "C", zone: "x", want: false},
	}
	for _, tc := range tests {
		got, why := g.Tripped(tc.cond, tc.zone)
		if got != tc.want {
			t.Errorf("Tripped(%s, %q): got %v, want %v", tc.cond, tc.zone, got, tc.want)
		}
		if !tc.want && why != "" {
			t.Errorf("Tripped(%s, %q): says %q, want nothing", tc.cond, tc.zone, why)
		}
		for _, w := range tc.wantSays {
			if !strings.Contains(why, w) {
				t.Errorf("Tripped(%s, %q): %q does not say %q", tc.cond, tc.zone, why, w)
			}
		}
	}
	if got, _ := (GuardState{}).Tripped("A", "x"); got {
		t.Errorf("an empty guard is tripped")
	}
}

func TestGuardStateFresh(t *testing.T) {
	g := GuardState{RenewTime: t0}
	tests := []struct {
		name      string
		g         GuardState
		observed  time.Duration // nothing: zero
		now       time.Duration
		want      bool
		wantUntil time.Duration // nothing: zero
	}{
		{name: "never written", g: GuardState{}, observed: nothing, want: false, wantUntil: nothing},
		{name: "fresh", g: g, observed: nothing, now: 119 * s, want: true, wantUntil: 120 * s},
		{name: "stale at renew + staleAfter", g: g, observed: nothing, now: 120 * s, want: false, wantUntil: 120 * s},
		{name: "seen before its renew time: from when seen", g: g, observed: -60 * s, now: 60 * s, want: false, wantUntil: 60 * s},
		{name: "seen after its renew time: from the renew time", g: g, observed: 100 * s, now: 110 * s, want: true, wantUntil: 120 * s},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var observed time.Time
			if tc.observed != nothing {
				observed = at(tc.observed)
			}
			got, until := tc.g.Fresh(observed, at(tc.now), 2*time.Minute)
			if got != tc.want {
				t.Errorf("fresh: got %v, want %v", got, tc.want)
			}
			gotUntil := nothing
			if !until.IsZero() {
				gotUntil = until.Sub(t0)
			}
			if gotUntil != tc.wantUntil {
				t.Errorf("until: got %v, want %v", gotUntil, tc.wantUntil)
			}
		})
	}
}

func TestGuardEncodeDecode(t *testing.T) {
	below := t0.Add(time.Minute)
	g := GuardState{
		RenewTime: t0.Add(2 * time.Minute), Leader: "coordinator-0",
		Conditions: map[corev1.NodeConditionType]map[string]Scope{
			"A": {
				FleetScope: {Unhealthy: 1, Nodes: 10},
				"x":        {Tripped: true, Since: t0, Unhealthy: 1, Nodes: 4, BelowSince: &below},
			},
		},
	}
	data := EncodeGuard(g)
	if len(data) != 1 || data[GuardDataKey] == "" {
		t.Fatalf("EncodeGuard: got %v, want one key %s", data, GuardDataKey)
	}
	got, err := DecodeGuard(data)
	if err != nil {
		t.Fatalf("DecodeGuard: %v", err)
	}
	if !reflect.DeepEqual(got, g) {
		t.Errorf("round trip: got %+v, want %+v", got, g)
	}
	// What Decide writes decodes to what it decided.
	d := Decide(Input{Config: testConfig(), Now: t0, Leader: "me", Nodes: zone("x", 4, 3, condA)})
	got, err = DecodeGuard(EncodeGuard(d.Guard))
	if err != nil || !reflect.DeepEqual(got, d.Guard) {
		t.Errorf("Decide's guard round trip: got %+v, %v; want %+v", got, err, d.Guard)
	}
}

func TestDecodeGuardErrors(t *testing.T) {
	valid := EncodeGuard(GuardState{RenewTime: t0})[GuardDataKey]
	tests := []struct {
		name string
		data map[string]string
		want string
	}{
		{name: "no key", data: map[string]string{"other": valid}, want: GuardDataKey},
		{name: "not JSON", data: map[string]string{GuardDataKey: "{"}, want: GuardDataKey},
		{name: "an unknown field", data: map[string]string{GuardDataKey: `{"renewTime":"2026-03-02T10:00:00Z","trippd":true}`}, want: "trippd"},
		{name: "an unknown scope field", data: map[string]string{GuardDataKey: `{"renewTime":"2026-03-02T10:00:00Z","conditions":{"A":{"x":{"tripped":true,"since":"2026-03-02T10:00:00Z","unhealthy":1,"nodes":2,"belowsince":null}}}}`}, want: "belowsince"},
		{name: "no renew time", data: map[string]string{GuardDataKey: `{"leader":"me"}`}, want: "renewTime is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := DecodeGuard(tc.data)
			if err == nil {
				t.Fatalf("DecodeGuard: got %+v, want an error", g)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeGuard: got %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// The wire formats' field names are the protocol: changing one breaks
// agents and coordinators of another version.
func TestWireFieldNames(t *testing.T) {
	b, _ := json.Marshal(GuardState{RenewTime: t0, Leader: "l", Conditions: map[corev1.NodeConditionType]map[string]Scope{
		"A": {"x": {Tripped: true, Since: t0, Unhealthy: 1, Nodes: 2, BelowSince: &t0}},
	}})
	want := `{"renewTime":"2026-03-02T10:00:00Z","leader":"l","conditions":{"A":{"x":{"tripped":true,"since":"2026-03-02T10:00:00Z","unhealthy":1,"nodes":2,"belowSince":"2026-03-02T10:00:00Z"}}}}`
	if got := string(b); got != want {
		t.Errorf("guard JSON: got %s, want %s", got, want)
	}
}
