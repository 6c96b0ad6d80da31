package faults_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/taints/faults"
)

var (
	faultNow   = time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)
	faultKnown = map[corev1.NodeConditionType]bool{"SelftaintMemoryPressure": true, "SelftaintDiskPressure": true}
	faultProbe = map[string]corev1.NodeConditionType{"memory": "SelftaintMemoryPressure", "disk": "SelftaintDiskPressure"}
)

func TestParseFaults(t *testing.T) {
	const max = time.Hour
	in := func(d time.Duration) string { return faultNow.Add(d).Format(time.RFC3339) }
	tests := []struct {
		name  string
		key   string
		value string
		want  *faults.Fault // nil: rejected
		// problem is a substring of the rejection; expired is its flag.
		problem string
		expired bool
	}{
		{
			name:  "full",
			key:   "fault.selftaint.io/SelftaintMemoryPressure",
			value: `{"status":"Unknown","reason":"GPUFellOff","message":"chaos day","expiresAt":"2026-11-23T11:30:00Z","injectedBy":"alice"}`,
			want: &faults.Fault{Target: "SelftaintMemoryPressure", Condition: "SelftaintMemoryPressure", Status: corev1.ConditionUnknown,
				Reason: "GPUFellOff", Message: "chaos day", ExpiresAt: faultNow.Add(30 * time.Minute), InjectedBy: "alice"},
		},
		{
			name:  "defaults, by probe name",
			key:   "fault.selftaint.io/disk",
			value: `{"expiresAt":"2026-11-23T11:10:00Z"}`,
			want: &faults.Fault{Target: "disk", Condition: "SelftaintDiskPressure", Status: corev1.ConditionTrue,
				Reason: faults.DefaultReason, Message: faults.DefaultMessage, ExpiresAt: faultNow.Add(10 * time.Minute)},
		},
		{
			name:  "expiry with an offset and fractional seconds",
			key:   "fault.selftaint.io/memory",
			value: `{"status":"False","expiresAt":"2026-11-23T12:10:00.5+01:00"}`,
			want: &faults.Fault{Target: "memory", Condition: "SelftaintMemoryPressure", Status: corev1.ConditionFalse,
				Reason: faults.DefaultReason, Message: faults.DefaultMessage, ExpiresAt: faultNow.Add(10*time.Minute + 500*time.Millisecond)},
		},
		{
			name:  "max duration plus the slack is fine",
			key:   "fault.selftaint.io/memory",
			value: `{"expiresAt":"` + in(max+faults.ExpirySlack) + `"}`,
			want: &faults.Fault{Target: "memory", Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue,
				Reason: faults.DefaultReason, Message: faults.DefaultMessage, ExpiresAt: faultNow.Add(max + faults.ExpirySlack)},
		},
		{name: "bad JSON", key: "fault.selftaint.io/memory", value: `{"status":"True",`, problem: "not a valid fault"},
		{name: "not an object", key: "fault.selftaint.io/memory", value: `null`, problem: "not a JSON object"},
		{name: "a string", key: "fault.selftaint.io/memory", value: `True`, problem: "not a JSON object"},
		{name: "unknown field", key: "fault.selftaint.io/memory", value: `{"expiresAt":"2026-11-23T11:10:00Z","duration":"5m"}`, problem: `unknown field "duration"`},
		{name: "field with the wrong case", key: "fault.selftaint.io/memory", value: `{"ExpiresAt":"2026-11-23T11:10:00Z"}`, problem: `unknown field "ExpiresAt"`},
		{name: "wrong type", key: "fault.selftaint.io/memory", value: `{"expiresAt":1234}`, problem: "expiresAt"},
		{name: "data after the object", key: "fault.selftaint.io/memory", value: `{"expiresAt":"2026-11-23T11:10:00Z"} {}`, problem: "data after the JSON object"},
		{name: "unknown condition", key: "fault.selftaint.io/SelftaintGPUFailure", value: `{"expiresAt":"2026-11-23T11:10:00Z"}`,
			problem: `unknown target "SelftaintGPUFailure": this agent manages the conditions [SelftaintDiskPressure, SelftaintMemoryPressure] and the probes [disk, memory]`},
		{name: "empty target", key: "fault.selftaint.io/", value: `{"expiresAt":"2026-11-23T11:10:00Z"}`, problem: `unknown target ""`},
		{name: "bad status", key: "fault.selftaint.io/memory", value: `{"status":"true","expiresAt":"2026-11-23T11:10:00Z"}`, problem: `status "true" is not True, False or Unknown`},
		{name: "reason with spaces", key: "fault.selftaint.io/memory", value: `{"reason":"it broke","expiresAt":"2026-11-23T11:10:00Z"}`, problem: `reason "it broke" must be CamelCase`},
		{name: "injectedBy too long", key: "fault.selftaint.io/memory", value: `{"injectedBy":"` + strings.Repeat("x", 300) + `","expiresAt":"2026-11-23T11:10:00Z"}`, problem: "injectedBy is longer than"},
		{name: "expiresAt missing", key: "fault.selftaint.io/memory", value: `{"status":"True"}`, problem: "expiresAt is required"},
		{name: "expiresAt unparseable", key: "fault.selftaint.io/memory", value: `{"expiresAt":"in 5 minutes"}`, problem: `expiresAt "in 5 minutes" is not an RFC 3339 time`},
		{name: "expiresAt without a zone", key: "fault.selftaint.io/memory", value: `{"expiresAt":"2026-11-23T11:10:00"}`, problem: "not an RFC 3339 time"},
		{name: "expiresAt in the past", key: "fault.selftaint.io/memory", value: `{"expiresAt":"2026-11-23T10:59:00Z"}`, problem: "expiresAt 2026-11-23T10:59:00Z is in the past", expired: true},
		{name: "expiresAt now", key: "fault.selftaint.io/memory", value: `{"expiresAt":"2026-11-23T11:00:00Z"}`, problem: "in the past", expired: true},
		{name: "absurd duration", key: "fault.selftaint.io/memory", value: `{"expiresAt":"` + in(100*time.Hour) + `"}`, problem: "is 100h0m0s away, beyond the maximum fault duration 1h0m0s"},
		{name: "just beyond max plus slack", key: "fault.selftaint.io/memory", value: `{"expiresAt":"` + in(max+faults.ExpirySlack+time.Second) + `"}`, problem: "beyond the maximum fault duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{tt.key: tt.value, "example.com/other": "not a fault", "fault.example.com/x": "{"}
			valid, rejected := faults.ParseAll(ann, faultKnown, faultProbe, faultNow, max)
			if tt.want != nil {
				want := *tt.want
				want.Key, want.Value = tt.key, tt.value
				if len(rejected) != 0 || len(valid) != 1 {
					t.Fatalf("got valid %+v, rejected %+v; want one valid fault", valid, rejected)
				}
				got := valid[0]
				if !got.ExpiresAt.Equal(want.ExpiresAt) {
					t.Errorf("ExpiresAt = %s, want %s", got.ExpiresAt, want.ExpiresAt)
				}
				got.ExpiresAt = want.ExpiresAt
				if got != want {
					t.Errorf("got %+v\nwant %+v", got, want)
				}
				return
			}
			if len(valid) != 0 || len(rejected) != 1 {
				t.Fatalf("got valid %+v, rejected %+v; want one rejection", valid, rejected)
			}
			r := rejected[0]
			if r.Key != tt.key || r.Value != tt.value || !strings.Contains(r.Problem, tt.problem) || r.Expired != tt.expired {
				t.Errorf("got %+v, want key %s, problem containing %q, expired %v", r, tt.key, tt.problem, tt.expired)
			}
		})
	}
}

func TestParseFaultsSortsAndIgnoresOthers(t *testing.T) {
	ann := map[string]string{
		"fault.selftaint.io/memory":                `{"expiresAt":"2026-11-23T11:05:00Z"}`,
		"fault.selftaint.io/SelftaintDiskPressure": `{"expiresAt":"2026-11-23T11:06:00Z"}`,
		"fault.selftaint.io/zzz":                   `{}`,
		"fault.selftaint.io/aaa":                   `{}`,
		"selftaint.io/owned-taints":                "x:NoSchedule",
	}
	valid, rejected := faults.ParseAll(ann, faultKnown, faultProbe, faultNow, time.Hour)
	var gotValid, gotRejected []string
	for _, f := range valid {
		gotValid = append(gotValid, f.Key)
	}
	for _, r := range rejected {
		gotRejected = append(gotRejected, r.Key)
	}
	if want := []string{"fault.selftaint.io/SelftaintDiskPressure", "fault.selftaint.io/memory"}; !slices.Equal(gotValid, want) {
		t.Errorf("valid = %v, want %v", gotValid, want)
	}
	if want := []string{"fault.selftaint.io/aaa", "fault.selftaint.io/zzz"}; !slices.Equal(gotRejected, want) {
		t.Errorf("rejected = %v, want %v", gotRejected, want)
	}
	if v, r := faults.ParseAll(nil, faultKnown, faultProbe, faultNow, time.Hour); v != nil || r != nil {
		t.Errorf("no annotations: got %v, %v, want nothing", v, r)
	}
}

func TestEffectiveFaults(t *testing.T) {
	mk := func(key string, cond corev1.NodeConditionType, exp time.Duration) faults.Fault {
		return faults.Fault{Key: key, Condition: cond, ExpiresAt: faultNow.Add(exp)}
	}
	tests := []struct {
		name   string
		faults []faults.Fault
		want   map[corev1.NodeConditionType]string
	}{
		{"none", nil, map[corev1.NodeConditionType]string{}},
		{"one per condition", []faults.Fault{mk("a", "M", time.Minute), mk("b", "D", time.Minute)}, map[corev1.NodeConditionType]string{"M": "a", "D": "b"}},
		{"latest expiry wins", []faults.Fault{mk("a", "M", time.Minute), mk("b", "M", 2*time.Minute)}, map[corev1.NodeConditionType]string{"M": "b"}},
		{"tie goes to the smaller key", []faults.Fault{mk("b", "M", time.Minute), mk("a", "M", time.Minute)}, map[corev1.NodeConditionType]string{"M": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[corev1.NodeConditionType]string{}
			for c, f := range faults.Effective(tt.faults) {
				got[c] = f.Key
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFaultSpecRoundTrip(t *testing.T) {
	spec := faults.Spec{Status: corev1.ConditionFalse, Reason: "Drill", Message: `quotes " and \ slashes`, ExpiresAt: "2026-11-23T11:20:00Z", InjectedBy: "bob"}
	v, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	f, err := faults.Parse(faults.AnnotationKey("memory"), v, faultKnown, faultProbe)
	if err != nil {
		t.Fatalf("ParseFault(%s): %v", v, err)
	}
	if f.Status != spec.Status || f.Reason != spec.Reason || f.Message != spec.Message || f.InjectedBy != spec.InjectedBy || !f.ExpiresAt.Equal(faultNow.Add(20*time.Minute)) {
		t.Errorf("round trip: got %+v from %s", f, v)
	}
	if p, _ := faults.CheckTime(f, faultNow, time.Hour); p != "" {
		t.Errorf("CheckFaultTime: %s, want valid", p)
	}
}

func TestValidFaultTarget(t *testing.T) {
	for target, ok := range map[string]bool{"memory": true, "SelftaintMemoryPressure": true, "example.com/GPUHealthy": false, "": false, strings.Repeat("x", 64): false} {
		if err := faults.ValidTarget(target); (err == nil) != ok {
			t.Errorf("ValidFaultTarget(%q) = %v, want ok=%v", target, err, ok)
		}
	}
}

// TestParseStrictDecoding pins what the shared strict decoder adds to a
// fault's value: a repeated field is an error, and a field with the wrong
// case gets a suggestion.
func TestParseStrictDecoding(t *testing.T) {
	key := faults.AnnotationKey("memory")
	tests := []struct {
		name, value, want string
	}{
		{"repeated field", `{"expiresAt":"2026-11-23T11:10:00Z","status":"True","status":"False"}`, `value is not a valid fault: duplicate field "status"`},
		{"wrong case", `{"expiresat":"2026-11-23T11:10:00Z"}`, `unknown field "expiresat" (did you mean "expiresAt"?)`},
		{"unknown", `{"expiresAt":"2026-11-23T11:10:00Z","ttl":"5m"}`, `unknown field "ttl" (known: status, reason, message, expiresAt, injectedBy)`},
		{"wrong type", `{"expiresAt":true}`, `value is not a valid fault: expiresAt: cannot unmarshal bool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := faults.Parse(key, tt.value, faultKnown, faultProbe)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%s): got error %v, want one containing %q", tt.value, err, tt.want)
			}
		})
	}
}
