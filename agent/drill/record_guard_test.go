package drill

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tdrill "github.com/selftaint/selftaint/taints/drill"
	"github.com/selftaint/selftaint/taints/fleet"
)

// guardState is a guard renewed at renew whose MemoryPressure scopes are
// tripped as given (scope -> tripped), 3 of 4 nodes each.
func guardState(renew time.Time, tripped map[string]bool) fleet.GuardState {
	g := fleet.GuardState{RenewTime: renew, Conditions: map[corev1.NodeConditionType]map[string]fleet.Scope{}}
	for scope, on := range tripped {
		if g.Conditions["MemoryPressure"] == nil {
			g.Conditions["MemoryPressure"] = map[string]fleet.Scope{}
		}
		g.Conditions["MemoryPressure"][scope] = fleet.Scope{Tripped: on, Since: renew, Unhealthy: 3, Nodes: 4}
	}
	return g
}

func TestGuardVersion(t *testing.T) {
	renew := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	g := guardState(renew, map[string]bool{"a": true})
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultGuardName, ResourceVersion: "7"}, Data: data}
	}
	for _, tc := range []struct {
		name    string
		cm      *corev1.ConfigMap
		deleted bool
		want    tdrill.GuardVersion
	}{
		{"decoded", cm(fleet.EncodeGuard(g)), false, tdrill.GuardVersion{ResourceVersion: "7", State: g}},
		{"no data", cm(nil), false, tdrill.GuardVersion{ResourceVersion: "7", Error: "guard: no guard.json in the ConfigMap's data"}},
		{"deleted", cm(fleet.EncodeGuard(g)), true, tdrill.GuardVersion{ResourceVersion: "7", Deleted: true}},
	} {
		got := guardVersion(tc.cm, tc.deleted)
		// Times decoded from JSON lose their monotonic reading and
		// location: compare them as instants.
		if !got.State.RenewTime.Equal(tc.want.State.RenewTime) {
			t.Errorf("%s: renewTime %v, want %v", tc.name, got.State.RenewTime, tc.want.State.RenewTime)
		}
		got.State.RenewTime, tc.want.State.RenewTime = time.Time{}, time.Time{}
		for _, s := range []*fleet.GuardState{&got.State, &tc.want.State} {
			for _, scopes := range s.Conditions {
				for k, sc := range scopes {
					sc.Since = sc.Since.UTC()
					scopes[k] = sc
				}
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: guardVersion = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestGuardLines(t *testing.T) {
	renew := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	v := func(tripped map[string]bool) tdrill.GuardVersion {
		return tdrill.GuardVersion{State: guardState(renew, tripped)}
	}
	calm := v(map[string]bool{"a": false, fleet.FleetScope: false})
	zoneA := v(map[string]bool{"a": true, fleet.FleetScope: false})
	both := v(map[string]bool{"a": true, fleet.FleetScope: true})
	bad := tdrill.GuardVersion{Error: "guard: renewTime is required"}
	// The nodes without a zone label are one zone to the guard, named "".
	noZone := v(map[string]bool{"": true, fleet.FleetScope: false})
	for _, tc := range []struct {
		name string
		prev *tdrill.GuardVersion
		next tdrill.GuardVersion
		want []string
	}{
		{"renewal", &calm, calm, nil},
		{"first seen calm", nil, calm, nil},
		{"first seen tripped", nil, zoneA, []string{"guard: MemoryPressure tripped in zone a (3 of 4 nodes)"}},
		{"trips in a zone", &calm, zoneA, []string{"guard: MemoryPressure tripped in zone a (3 of 4 nodes)"}},
		{"trips fleet-wide too", &zoneA, both, []string{"guard: MemoryPressure tripped fleet-wide (3 of 4 nodes)"}},
		{"resets", &both, calm, []string{"guard: MemoryPressure reset fleet-wide", "guard: MemoryPressure reset in zone a"}},
		{"scope dropped while tripped resets", &zoneA, v(nil), []string{"guard: MemoryPressure reset in zone a"}},
		{"unreadable", &zoneA, bad, []string{"guard: unreadable: guard: renewTime is required"}},
		{"still unreadable", &bad, bad, nil},
		{"readable again, tripped", &bad, zoneA, []string{"guard: MemoryPressure tripped in zone a (3 of 4 nodes)"}},
		{"trips among the nodes without a zone (named, not an empty zone)", &calm, noZone, []string{"guard: MemoryPressure tripped among the nodes without a zone (3 of 4 nodes)"}},
		{"deleted", &zoneA, tdrill.GuardVersion{Deleted: true}, []string{"guard: deleted (nothing tripped)"}},
	} {
		if got := guardLines(tc.prev, tc.next); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: guardLines = %q, want %q", tc.name, got, tc.want)
		}
	}
}
