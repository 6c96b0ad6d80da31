package taints

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

// rec is the record entries of taints as they are on the Node.
func rec(ts ...corev1.Taint) []OwnedTaint {
	var out []OwnedTaint
	for _, t := range ts {
		out = append(out, OwnedOf(t))
	}
	return out
}

// at is t with timeAdded set.
func at(t corev1.Taint, added time.Time) corev1.Taint {
	t.TimeAdded = ptrTime(added)
	return t
}

func TestPlanTaints(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	then := now.Add(-42 * time.Minute)
	ours := taint("selftaint.io/memory-pressure", "", corev1.TaintEffectNoSchedule)
	oursNoExec := taint("selftaint.io/gpu-lost", "", corev1.TaintEffectNoExecute)
	foreign := taint("dedicated", "ml", corev1.TaintEffectNoSchedule)
	kubelet := taint("node.kubernetes.io/not-ready", "", corev1.TaintEffectNoExecute)
	// Someone else holds the same key and effect we want.
	squatter := taint("selftaint.io/memory-pressure", "theirs", corev1.TaintEffectNoSchedule)

	tests := []struct {
		name                      string
		current                   []corev1.Taint
		owned                     []OwnedTaint
		desired                   []corev1.Taint
		wantTaints                []corev1.Taint
		wantRecord                string
		wantAdded, wantRemoved    int
		wantRestored, wantForeign int
		wantChanged               bool
	}{
		{
			name:    "add ours after foreign ones, keep their order",
			current: []corev1.Taint{foreign, kubelet}, desired: []corev1.Taint{ours},
			wantTaints: []corev1.Taint{foreign, kubelet, ours}, wantRecord: "selftaint.io/memory-pressure:NoSchedule", wantAdded: 1, wantChanged: true,
		},
		{
			name:    "remove only ours",
			current: []corev1.Taint{foreign, ours, kubelet}, owned: rec(ours),
			wantTaints: []corev1.Taint{foreign, kubelet}, wantRemoved: 1, wantChanged: true,
		},
		{
			name:    "nothing to do",
			current: []corev1.Taint{foreign, ours}, owned: rec(ours), desired: []corev1.Taint{ours},
			wantTaints: []corev1.Taint{foreign, ours}, wantRecord: "selftaint.io/memory-pressure:NoSchedule",
		},
		{
			name:    "restore ours that someone deleted",
			current: []corev1.Taint{foreign}, owned: rec(ours), desired: []corev1.Taint{ours},
			wantTaints: []corev1.Taint{foreign, ours}, wantRecord: "selftaint.io/memory-pressure:NoSchedule", wantAdded: 1, wantRestored: 1, wantChanged: true,
		},
		{
			name:    "never claim a foreign taint with our key",
			current: []corev1.Taint{squatter}, desired: []corev1.Taint{ours},
			wantTaints: []corev1.Taint{squatter}, wantForeign: 1,
		},
		{
			name:       "never remove a foreign taint with our key",
			current:    []corev1.Taint{squatter},
			wantTaints: []corev1.Taint{squatter},
		},
		{
			name:        "drop stale ownership of a taint that is gone",
			owned:       rec(ours),
			wantChanged: true,
		},
		{
			name:       "NoExecute gets timeAdded, recorded",
			desired:    []corev1.Taint{oursNoExec},
			wantTaints: []corev1.Taint{at(oursNoExec, now)},
			wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T10:00:00Z", wantAdded: 1, wantChanged: true,
		},
		{
			name:    "restored NoExecute gets the timeAdded its record kept",
			current: []corev1.Taint{foreign}, owned: rec(at(oursNoExec, then)), desired: []corev1.Taint{oursNoExec},
			wantTaints: []corev1.Taint{foreign, at(oursNoExec, then)},
			wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T09:18:00Z", wantAdded: 1, wantRestored: 1, wantChanged: true,
		},
		{
			name:    "restored from a record of the first format: timeAdded now",
			owned:   []OwnedTaint{{TaintID: IDOf(oursNoExec)}},
			desired: []corev1.Taint{oursNoExec}, wantTaints: []corev1.Taint{at(oursNoExec, now)},
			wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T10:00:00Z", wantAdded: 1, wantRestored: 1, wantChanged: true,
		},
		{
			name:    "a recorded timeAdded after now is restored as now",
			owned:   rec(at(oursNoExec, now.Add(time.Hour))),
			desired: []corev1.Taint{oursNoExec}, wantTaints: []corev1.Taint{at(oursNoExec, now)},
			wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T10:00:00Z", wantAdded: 1, wantRestored: 1, wantChanged: true,
		},
		{
			name:    "a restored NoSchedule taint that had a timeAdded gets it back",
			owned:   rec(at(ours, then)),
			desired: []corev1.Taint{ours}, wantTaints: []corev1.Taint{at(ours, then)},
			wantRecord: "selftaint.io/memory-pressure:NoSchedule@2026-11-23T09:18:00Z", wantAdded: 1, wantRestored: 1, wantChanged: true,
		},
		{
			name:    "a kept NoExecute taint keeps its timeAdded: nothing to do",
			current: []corev1.Taint{at(oursNoExec, then)}, owned: rec(at(oursNoExec, then)), desired: []corev1.Taint{oursNoExec},
			wantTaints: []corev1.Taint{at(oursNoExec, then)}, wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T09:18:00Z",
		},
		{
			name:    "a record of the first format gets the timeAdded on the Node",
			current: []corev1.Taint{at(oursNoExec, then)}, owned: []OwnedTaint{{TaintID: IDOf(oursNoExec)}}, desired: []corev1.Taint{oursNoExec},
			wantTaints: []corev1.Taint{at(oursNoExec, then)}, wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T09:18:00Z", wantChanged: true,
		},
		{
			name:    "the timeAdded on the Node wins over the record's",
			current: []corev1.Taint{at(oursNoExec, then)}, owned: rec(at(oursNoExec, now)), desired: []corev1.Taint{oursNoExec},
			wantTaints: []corev1.Taint{at(oursNoExec, then)}, wantRecord: "selftaint.io/gpu-lost:NoExecute@2026-11-23T09:18:00Z", wantChanged: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanTaints(tt.current, tt.owned, tt.desired, now)
			if !reflect.DeepEqual(p.Taints, tt.wantTaints) {
				t.Errorf("taints = %v, want %v", p.Taints, tt.wantTaints)
			}
			if got := FormatOwned(p.Owned); got != tt.wantRecord {
				t.Errorf("record = %q, want %q", got, tt.wantRecord)
			}
			if len(p.Added) != tt.wantAdded || len(p.Removed) != tt.wantRemoved || len(p.Restored) != tt.wantRestored || len(p.Foreign) != tt.wantForeign {
				t.Errorf("added/removed/restored/foreign = %d/%d/%d/%d, want %d/%d/%d/%d",
					len(p.Added), len(p.Removed), len(p.Restored), len(p.Foreign),
					tt.wantAdded, tt.wantRemoved, tt.wantRestored, tt.wantForeign)
			}
			if p.Changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", p.Changed, tt.wantChanged)
			}
		})
	}
}

func TestOwnedAnnotationRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string
	}{
		{name: "empty", in: "", want: ""},
		{name: "first format, sorted", in: "b:NoSchedule, a:NoExecute", want: "a:NoExecute,b:NoSchedule"},
		{name: "first format, a domain key", in: "example.com/x:PreferNoSchedule", want: "example.com/x:PreferNoSchedule"},
		{name: "with timeAdded", in: "selftaint.io/gpu:NoExecute@2026-11-23T10:00:00Z", want: "selftaint.io/gpu:NoExecute@2026-11-23T10:00:00Z"},
		{name: "both formats mixed", in: "b:NoExecute@2026-11-23T10:00:00Z,a:NoSchedule", want: "a:NoSchedule,b:NoExecute@2026-11-23T10:00:00Z"},
		{name: "an offset is written in UTC", in: "a:NoExecute@2026-11-23T11:00:00+01:00", want: "a:NoExecute@2026-11-23T10:00:00Z"},
		{name: "fractional seconds are kept to the second", in: "a:NoExecute@2026-11-23T10:00:00.75Z", want: "a:NoExecute@2026-11-23T10:00:00Z"},
		{name: "no effect", in: "nokey", wantErr: "not key:Effect"},
		{name: "unknown effect", in: "a:Sometimes", wantErr: "unknown effect"},
		{name: "no key", in: ":NoSchedule", wantErr: "not key:Effect"},
		{name: "no key, timed", in: ":NoExecute@2026-11-23T10:00:00Z", wantErr: "not key:Effect"},
		{name: "a time that is not RFC 3339", in: "a:NoExecute@yesterday", wantErr: "not an RFC 3339 time"},
		{name: "an empty time", in: "a:NoExecute@", wantErr: "not an RFC 3339 time"},
		{name: "one bad entry spoils the record", in: "a:NoSchedule,b:NoExecute@x", wantErr: "b:NoExecute@x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRecord(tt.in)
			ids, idErr := ParseOwned(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), OwnedTaintsAnnotation) {
					t.Errorf("ParseRecord(%q) error = %v, want it to name the annotation and mention %q", tt.in, err, tt.wantErr)
				}
				if idErr == nil {
					t.Errorf("ParseOwned(%q) error = nil, want one", tt.in)
				}
				return
			}
			if err != nil || idErr != nil {
				t.Fatalf("ParseRecord(%q), ParseOwned: %v, %v", tt.in, err, idErr)
			}
			if s := FormatOwned(got); s != tt.want {
				t.Errorf("FormatOwned(ParseRecord(%q)) = %q, want %q", tt.in, s, tt.want)
			}
			if got, want := FormatOwned(ids), FormatOwned(IDs(got)); got != want {
				t.Errorf("FormatOwned(ParseOwned(%q)) = %q, want the record's keys and effects %q", tt.in, got, want)
			}
		})
	}
}

func TestOwnedByKey(t *testing.T) {
	memRule := Rule{Condition: "Mem", Status: T, Taint: taint("selftaint.io/memory-pressure", "", corev1.TaintEffectNoExecute), Fallback: corev1.TaintEffectNoSchedule}
	pidsRule := Rule{Condition: "Pids", Status: T, Taint: taint("example.com/pids", "", corev1.TaintEffectNoSchedule)}
	reservedRule := Rule{Condition: "Disk", Status: T, Taint: taint("node.kubernetes.io/disk-pressure", "", corev1.TaintEffectNoSchedule), AllowReservedKey: true}
	rules := []Rule{memRule, pidsRule, reservedRule}
	id := func(key string, effect corev1.TaintEffect) TaintID { return TaintID{Key: key, Effect: effect} }
	ownable := Ownable{Taints: map[TaintID]bool{
		id("selftaint.io/memory-pressure", "NoExecute"): true, id("selftaint.io/memory-pressure", "NoSchedule"): true,
		id("example.com/pids", "NoSchedule"): true, id("node.kubernetes.io/disk-pressure", "NoSchedule"): true,
		id("nvidia.com/gpu", "NoSchedule"): true, id("selftaint.io/uninitialized", "NoSchedule"): true,
		id("startup-taint.cluster-autoscaler.kubernetes.io/selftaint-uninitialized", "NoSchedule"): true,
	}}
	tests := []struct {
		name string
		id   TaintID
		want bool
	}{
		{"a rule's taint under the prefix", id("selftaint.io/memory-pressure", "NoExecute"), true},
		{"a NoExecute rule's fallback", id("selftaint.io/memory-pressure", "NoSchedule"), true},
		{"the uninitialized taint", id("selftaint.io/uninitialized", "NoSchedule"), true},
		{"a rule's key outside the prefix", id("example.com/pids", "NoSchedule"), true},
		{"our key under an effect the config cannot produce", id("selftaint.io/memory-pressure", "PreferNoSchedule"), false},
		{"a prefixed key the config does not name (an operator's)", id("selftaint.io/maintenance", "NoSchedule"), false},
		{"the virtual nodes' registration taint", id("selftaint.io/virtual", "NoSchedule"), false},
		{"a hardware taint: the resource's name, often the provider's", id("nvidia.com/gpu", "NoSchedule"), false},
		{"a rule's key under a reserved prefix", id("node.kubernetes.io/disk-pressure", "NoSchedule"), false},
		{"the autoscaler's startup key (claimed as the init taint instead)", id("startup-taint.cluster-autoscaler.kubernetes.io/selftaint-uninitialized", "NoSchedule"), false},
		{"a foreign key", id("dedicated", "NoSchedule"), false},
	}
	for _, tt := range tests {
		if got := OwnedByKey(tt.id, ownable, rules); got != tt.want {
			t.Errorf("%s: OwnedByKey(%s) = %v, want %v", tt.name, tt.id, got, tt.want)
		}
	}
}

func TestValidateRules(t *testing.T) {
	known := map[corev1.NodeConditionType]bool{"SelftaintMemoryPressure": true}
	good := Rule{Condition: "SelftaintMemoryPressure", Status: T, Taint: taint("selftaint.io/memory-pressure", "", corev1.TaintEffectNoSchedule)}
	mod := func(f func(*Rule)) Rule { r := good; f(&r); return r }
	tests := []struct {
		name  string
		rules []Rule
		want  []string // substrings of the aggregated error, empty = valid
	}{
		{name: "valid", rules: []Rule{good}},
		{name: "unknown condition", rules: []Rule{mod(func(r *Rule) { r.Condition = "Nope" })}, want: []string{"rules[0].condition", "Nope"}},
		{name: "bad effect", rules: []Rule{mod(func(r *Rule) { r.Taint.Effect = "NoWay" })}, want: []string{"rules[0].taint.effect", "NoWay"}},
		{name: "missing effect", rules: []Rule{mod(func(r *Rule) { r.Taint.Effect = "" })}, want: []string{"rules[0].taint.effect", "Required"}},
		{name: "bad status", rules: []Rule{mod(func(r *Rule) { r.Status = "Maybe" })}, want: []string{"rules[0].status"}},
		{name: "bad key", rules: []Rule{mod(func(r *Rule) { r.Taint.Key = "has space" })}, want: []string{"rules[0].taint.key"}},
		{name: "bad value", rules: []Rule{mod(func(r *Rule) { r.Taint.Value = "not a label value!" })}, want: []string{"rules[0].taint.value"}},
		{name: "reserved key refused with the reason", rules: []Rule{mod(func(r *Rule) { r.Taint.Key = "node.kubernetes.io/memory-pressure" })},
			want: []string{"rules[0].taint.key", "node.kubernetes.io/", "node lifecycle controller", "allowReservedKey"}},
		{name: "reserved key allowed by opt-in", rules: []Rule{mod(func(r *Rule) { r.Taint.Key = "node.kubernetes.io/memory-pressure"; r.AllowReservedKey = true })}},
		{name: "disagreeing values for one key and effect", rules: []Rule{good, mod(func(r *Rule) { r.Taint.Value = "other" })}, want: []string{"rules[1].taint.value", "must agree"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateRules(tt.rules, known, field.NewPath("rules"))
			if len(tt.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("got errors %v, want none", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("got no error, want one mentioning %q", tt.want)
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestDesired(t *testing.T) {
	mem := Rule{Condition: "Mem", Status: T, Taint: taint("selftaint.io/mem", "", corev1.TaintEffectNoSchedule)}
	memUnknown := mem
	memUnknown.TaintOnUnknown = true
	disk := Rule{Condition: "Disk", Status: T, Taint: taint("selftaint.io/disk", "", corev1.TaintEffectNoExecute), Fallback: corev1.TaintEffectNoSchedule}
	diskPrefer := disk
	diskPrefer.Fallback = corev1.TaintEffectPreferNoSchedule
	type statuses = map[corev1.NodeConditionType]corev1.ConditionStatus
	type gates = map[corev1.NodeConditionType]Gate
	granted := gates{"Disk": {NoExecute: true}}
	tests := []struct {
		name     string
		rules    []Rule
		statuses statuses
		gates    gates
		present  []string
		want     []string
		wantHeld []string
	}{
		{name: "True taints", rules: []Rule{mem, disk}, statuses: statuses{"Mem": T, "Disk": F}, want: []string{"selftaint.io/mem:NoSchedule"}},
		{name: "Unknown does not taint by default", rules: []Rule{mem}, statuses: statuses{"Mem": U}},
		{name: "Unknown taints when the rule says so", rules: []Rule{memUnknown}, statuses: statuses{"Mem": U}, want: []string{"selftaint.io/mem:NoSchedule"}},
		{name: "undecided implies nothing", rules: []Rule{mem, disk}, statuses: statuses{}, gates: granted},
		{name: "NoExecute without a gate is its fallback only", rules: []Rule{disk}, statuses: statuses{"Disk": T},
			want: []string{"selftaint.io/disk:NoSchedule"}},
		{name: "NoExecute with a PreferNoSchedule fallback", rules: []Rule{diskPrefer}, statuses: statuses{"Disk": T},
			want: []string{"selftaint.io/disk:PreferNoSchedule"}},
		{name: "granted: fallback and NoExecute, sorted and deduplicated", rules: []Rule{mem, disk, mem}, statuses: statuses{"Mem": T, "Disk": T}, gates: granted,
			want: []string{"selftaint.io/disk:NoExecute", "selftaint.io/disk:NoSchedule", "selftaint.io/mem:NoSchedule"}},
		{name: "held: nothing new is added", rules: []Rule{mem, disk}, statuses: statuses{"Mem": T, "Disk": T},
			gates:    gates{"Mem": {Hold: true}, "Disk": {Hold: true, NoExecute: true}},
			wantHeld: []string{"selftaint.io/disk:NoExecute", "selftaint.io/disk:NoSchedule", "selftaint.io/mem:NoSchedule"}},
		{name: "held: what is on stays", rules: []Rule{mem, disk}, statuses: statuses{"Mem": T, "Disk": T},
			gates: gates{"Mem": {Hold: true}, "Disk": {Hold: true, NoExecute: true}}, present: []string{"selftaint.io/disk:NoSchedule"},
			want: []string{"selftaint.io/disk:NoSchedule"}, wantHeld: []string{"selftaint.io/disk:NoExecute", "selftaint.io/mem:NoSchedule"}},
		{name: "a taint an unheld rule asks for is not held", rules: []Rule{mem, {Condition: "Other", Status: T, Taint: mem.Taint}},
			statuses: statuses{"Mem": T, "Other": T}, gates: gates{"Mem": {Hold: true}}, want: []string{"selftaint.io/mem:NoSchedule"}},
	}
	ids := func(ts []corev1.Taint) []string {
		var out []string
		for _, d := range ts {
			out = append(out, IDOf(d).String())
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			present := map[TaintID]bool{}
			for _, p := range tt.present {
				parsed, err := ParseOwned(p)
				if err != nil {
					t.Fatal(err)
				}
				present[parsed[0]] = true
			}
			got, held := Desired(tt.rules, tt.statuses, tt.gates, present)
			if !reflect.DeepEqual(ids(got), tt.want) {
				t.Errorf("Desired = %v, want %v", ids(got), tt.want)
			}
			if !reflect.DeepEqual(ids(held), tt.wantHeld) {
				t.Errorf("held = %v, want %v", ids(held), tt.wantHeld)
			}
		})
	}
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
