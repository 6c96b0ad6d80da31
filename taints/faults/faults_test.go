package faults_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		{name: "expiry in year 9999 said plainly", key: "fault.selftaint.io/memory", value: `{"expiresAt":"9999-12-31T00:00:00Z"}`,
			problem: "expiresAt 9999-12-31T00:00:00Z is more than 100 years away, beyond the maximum fault duration 1h0m0s"},
		{name: "expiry a year away in days", key: "fault.selftaint.io/memory", value: `{"expiresAt":"` + in(365*24*time.Hour) + `"}`,
			problem: "is about 365 days away, beyond"},
		{
			name:  "injectedAt within max of expiresAt",
			key:   "fault.selftaint.io/memory",
			value: `{"injectedAt":"` + in(-10*time.Minute) + `","expiresAt":"` + in(50*time.Minute) + `"}`,
			want: &faults.Fault{Target: "memory", Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue, Reason: faults.DefaultReason,
				Message: faults.DefaultMessage, ExpiresAt: faultNow.Add(50 * time.Minute), InjectedAt: faultNow.Add(-10 * time.Minute)},
		},
		{
			name:  "injectedAt ahead of this clock counts from now",
			key:   "fault.selftaint.io/memory",
			value: `{"injectedAt":"` + in(3*time.Second) + `","expiresAt":"` + in(max) + `"}`,
			want: &faults.Fault{Target: "memory", Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue, Reason: faults.DefaultReason,
				Message: faults.DefaultMessage, ExpiresAt: faultNow.Add(max), InjectedAt: faultNow.Add(3 * time.Second)},
		},
		{name: "lasting too long from injectedAt, though expiring within max of now", key: "fault.selftaint.io/memory",
			value:   `{"injectedAt":"` + in(-90*time.Minute) + `","expiresAt":"` + in(30*time.Minute) + `"}`,
			problem: "the fault lasts 2h0m0s, from injectedAt 2026-11-23T09:30:00Z to expiresAt 2026-11-23T11:30:00Z, beyond the maximum fault duration 1h0m0s"},
		{name: "injectedAt unparseable", key: "fault.selftaint.io/memory", value: `{"injectedAt":"yesterday","expiresAt":"` + in(time.Minute) + `"}`,
			problem: `injectedAt "yesterday" is not an RFC 3339 time`},
		{name: "injectedAt after expiresAt", key: "fault.selftaint.io/memory", value: `{"injectedAt":"` + in(2*time.Minute) + `","expiresAt":"` + in(time.Minute) + `"}`,
			problem: "injectedAt 2026-11-23T11:02:00Z is not before expiresAt 2026-11-23T11:01:00Z"},
		{name: "null status", key: "fault.selftaint.io/memory", value: `{"status":null,"expiresAt":"` + in(time.Minute) + `"}`,
			problem: `status is null: give "True", "False" or "Unknown", or leave the field out for True`},
		{name: "null status with spaces", key: "fault.selftaint.io/memory", value: `{"status": null , "expiresAt":"` + in(time.Minute) + `"}`, problem: "status is null"},
		{name: "null reason", key: "fault.selftaint.io/memory", value: `{"reason":null,"expiresAt":"` + in(time.Minute) + `"}`, problem: "reason is null: give a string or leave the field out"},
		{name: "null message", key: "fault.selftaint.io/memory", value: `{"message":null,"expiresAt":"` + in(time.Minute) + `"}`, problem: "message is null"},
		{name: "null injectedAt", key: "fault.selftaint.io/memory", value: `{"injectedAt":null,"expiresAt":"` + in(time.Minute) + `"}`, problem: "injectedAt is null"},
		{name: "null injectedBy", key: "fault.selftaint.io/memory", value: `{"injectedBy":null,"expiresAt":"` + in(time.Minute) + `"}`, problem: "injectedBy is null"},
		{name: "null expiresAt", key: "fault.selftaint.io/memory", value: `{"expiresAt":null}`, problem: "expiresAt is null"},
		{name: "the string null is a bad status, not a null", key: "fault.selftaint.io/memory", value: `{"status":"null","expiresAt":"` + in(time.Minute) + `"}`,
			problem: `status "null" is not True, False or Unknown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{tt.key: tt.value, "example.com/other": "not a fault", "fault.example.com/x": "{"}
			valid, rejected := faults.ParseAll(ann, nil, faultKnown, faultProbe, faultNow, max)
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
	valid, rejected := faults.ParseAll(ann, nil, faultKnown, faultProbe, faultNow, time.Hour)
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
	if v, r := faults.ParseAll(nil, nil, faultKnown, faultProbe, faultNow, time.Hour); v != nil || r != nil {
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
	if p, _ := faults.CheckTime(f, time.Time{}, faultNow, time.Hour); p != "" {
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
		{"wrong case injectedAt", `{"expiresAt":"2026-11-23T11:10:00Z","injectedat":"2026-11-23T11:00:00Z"}`, `unknown field "injectedat" (did you mean "injectedAt"?)`},
		{"unknown", `{"expiresAt":"2026-11-23T11:10:00Z","ttl":"5m"}`, `unknown field "ttl" (known: status, reason, message, expiresAt, injectedAt, injectedBy)`},
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

// TestCheckTimeFromStart pins where a fault's duration counts from: the
// earliest of its injectedAt, when its annotation was written and now, so a
// later look (an agent restarted an hour on) judges it as the first did.
func TestCheckTimeFromStart(t *testing.T) {
	const max = time.Hour
	at := func(d time.Duration) time.Time { return faultNow.Add(d) }
	tests := []struct {
		name                  string
		injected, seen, check time.Duration // offsets; injected/seen 1 for none
		expires               time.Duration
		problem               string // substring; empty: applies
	}{
		{name: "no start but now: 90m away is too long", injected: 1, seen: 1, check: 0, expires: 90 * time.Minute, problem: "expiresAt 2026-11-23T12:30:00Z is 1h30m0s away"},
		{name: "no start but now, an hour later: 30m away applies (first sight is all there is)", injected: 1, seen: 1, check: time.Hour, expires: 90 * time.Minute},
		{name: "injectedAt: an hour later still too long", injected: 0, seen: 1, check: time.Hour, expires: 90 * time.Minute,
			problem: "the fault lasts 1h30m0s, from injectedAt 2026-11-23T11:00:00Z"},
		{name: "written time: an hour later still too long", injected: 1, seen: 0, check: time.Hour, expires: 90 * time.Minute,
			problem: "the fault lasts 1h30m0s, from when its annotation was written (2026-11-23T11:00:00Z) to expiresAt 2026-11-23T12:30:00Z"},
		{name: "written before injectedAt: the earlier counts", injected: 20 * time.Minute, seen: 0, check: 30 * time.Minute, expires: 75 * time.Minute,
			problem: "from when its annotation was written"},
		{name: "injectedAt before written: the earlier counts", injected: 0, seen: 20 * time.Minute, check: 30 * time.Minute, expires: 75 * time.Minute,
			problem: "from injectedAt"},
		{name: "within max of injectedAt, checked later: applies", injected: 0, seen: 5 * time.Second, check: 59 * time.Minute, expires: time.Hour},
		{name: "within max plus slack of injectedAt: applies", injected: 0, seen: 1, check: 0, expires: max + faults.ExpirySlack},
		{name: "expired beats too long", injected: 0, seen: 1, check: 3 * time.Hour, expires: 2 * time.Hour, problem: "is in the past"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := faults.Fault{ExpiresAt: at(tt.expires)}
			var seen time.Time
			if tt.injected != 1 {
				f.InjectedAt = at(tt.injected)
			}
			if tt.seen != 1 {
				seen = at(tt.seen)
			}
			got, _ := faults.CheckTime(f, seen, at(tt.check), max)
			if tt.problem == "" && got != "" || !strings.Contains(got, tt.problem) {
				t.Errorf("CheckTime = %q, want %q", got, tt.problem)
			}
		})
	}
	// A maximum near the largest Duration must not overflow with the slack.
	if got, _ := faults.CheckTime(faults.Fault{ExpiresAt: at(time.Hour)}, time.Time{}, faultNow, time.Duration(1<<63-1)); got != "" {
		t.Errorf("CheckTime with the largest maximum = %q, want the fault to apply", got)
	}
}

func TestSpan(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1500 * time.Millisecond, "2s"},
		{90 * time.Minute, "1h30m0s"},
		{7 * 24 * time.Hour, "168h0m0s"},
		{7*24*time.Hour + time.Second, "about 7 days"},
		{400 * 24 * time.Hour, "about 400 days"},
		{36525 * 24 * time.Hour, "about 36525 days"},
		{36526 * 24 * time.Hour, "more than 100 years"},
		{time.Duration(1<<63 - 1), "more than 100 years"},
		{-90 * time.Minute, "-1h30m0s"},
		{time.Duration(-1 << 63), "-more than 100 years"},
	}
	for _, tt := range tests {
		if got := faults.Span(tt.d); got != tt.want {
			t.Errorf("Span(%d) = %q, want %q", tt.d, got, tt.want)
		}
	}
	// What a year-9999 expiry reads as, from the time it is judged.
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	if got, want := faults.Span(far.Sub(faultNow)), "more than 100 years"; got != want {
		t.Errorf("Span(9999-12-31 - now) = %q, want %q", got, want)
	}
}

// TestLasting checks the fault the CLI writes: injected now, lasting at
// least d, and within the maximum d when judged from its injectedAt.
func TestLasting(t *testing.T) {
	now := faultNow.Add(400 * time.Millisecond)
	spec := faults.Spec{InjectedBy: "ci"}.Lasting(now, time.Hour)
	if got, want := spec.InjectedAt, "2026-11-23T11:00:00Z"; got != want {
		t.Errorf("injectedAt = %s, want %s", got, want)
	}
	if got, want := spec.ExpiresAt, "2026-11-23T12:00:01Z"; got != want {
		t.Errorf("expiresAt = %s, want %s (rounded up: at least the hour)", got, want)
	}
	v, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	f, err := faults.Parse(faults.AnnotationKey("memory"), v, faultKnown, faultProbe)
	if err != nil {
		t.Fatalf("Parse(%s): %v", v, err)
	}
	for _, later := range []time.Duration{0, 30 * time.Minute, 59 * time.Minute} {
		if p, _ := faults.CheckTime(f, time.Time{}, now.Add(later), time.Hour); p != "" {
			t.Errorf("checked %s after the injection: %s, want it to apply", later, p)
		}
	}
	long := faults.Spec{}.Lasting(now, 2*time.Hour)
	f, err = faults.Parse(faults.AnnotationKey("memory"), mustEncode(t, long), faultKnown, faultProbe)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := faults.CheckTime(f, time.Time{}, now.Add(90*time.Minute), time.Hour); !strings.Contains(p, "from injectedAt") {
		t.Errorf("a 2h fault checked 90m on = %q, want it still too long, from injectedAt", p)
	}
}

func mustEncode(t *testing.T, s faults.Spec) string {
	t.Helper()
	v, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWrittenAt reads when fault annotations were written from the Node's
// managed fields: the owner's time, the earliest of several owners, none
// for an entry without a time, and only fault annotations.
func TestWrittenAt(t *testing.T) {
	mem, disk, pid := faults.AnnotationKey("memory"), faults.AnnotationKey("disk"), faults.AnnotationKey("pid")
	entry := func(manager string, at time.Duration, keys ...string) metav1.ManagedFieldsEntry {
		ann := map[string]any{}
		for _, k := range keys {
			ann["f:"+k] = map[string]any{}
		}
		raw, err := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:annotations": ann}})
		if err != nil {
			t.Fatal(err)
		}
		e := metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}
		if at != 1 {
			e.Time = &metav1.Time{Time: faultNow.Add(at)}
		}
		return e
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{mem: "m", disk: "d", pid: "p", "example.com/x": "x"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			entry("selftaint-fault", -time.Hour, mem, disk),
			entry("kubectl-annotate", -2*time.Hour, disk, "example.com/x"),
			entry("untimed", 1, pid),
			entry("gone", -3*time.Hour, faults.AnnotationKey("network")),
		},
	}}
	got := faults.WrittenAt(node)
	want := map[string]faults.Written{
		mem:  {Value: "m", At: faultNow.Add(-time.Hour)},
		disk: {Value: "d", At: faultNow.Add(-2 * time.Hour)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("WrittenAt = %v, want %v", got, want)
	}
	m := faults.Memory{Written: got}
	if got, want := m.WrittenTime(mem, "m"), faultNow.Add(-time.Hour); !got.Equal(want) {
		t.Errorf("WrittenTime(memory, m) = %s, want %s", got, want)
	}
	if got := m.WrittenTime(mem, "changed since"); !got.IsZero() {
		t.Errorf("WrittenTime for another value = %s, want zero", got)
	}
}

// TestSetByFault: the condition an agent finds on its Node at start-up is
// a fault's, not its probe's, when its message carries a fault's mark
// (whatever the reason, whether or not the fault is still there) or it has
// the default fault reason; a probe's words, even ones that look alike,
// are the probe's. The mark survives the cap on a message's length.
func TestSetByFault(t *testing.T) {
	f := faults.Fault{Key: faults.AnnotationKey("memory"), Condition: "SelftaintMemoryPressure", Status: corev1.ConditionTrue,
		Reason: "ChaosDrill", Message: "pretend memory is short"}
	long := f
	long.Message = strings.Repeat("x", 2000)
	cond := func(reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: f.Condition, Status: corev1.ConditionTrue, Reason: reason, Message: message}
	}
	truncate := func(s string, n int) string { return s[:n-3] + "..." }
	tests := []struct {
		name    string
		c       corev1.NodeCondition
		want    bool
		wantKey string
	}{
		{name: "a fault with a custom reason, marked", c: cond("ChaosDrill", f.ConditionMessage()), want: true, wantKey: f.Key},
		{name: "marked, message capped", c: cond("ChaosDrill", truncate(long.ConditionMessage(), 1024)), want: true, wantKey: f.Key},
		{name: "marked, by a probe-name target", c: cond("X", "[fault.selftaint.io/custom-C] drill"), want: true, wantKey: "fault.selftaint.io/custom-C"},
		{name: "marked, empty message", c: cond("X", "[fault.selftaint.io/memory] "), want: true, wantKey: f.Key},
		{name: "the default reason, unmarked (an older agent)", c: cond(faults.DefaultReason, "drill"), want: true},
		{name: "a probe's finding", c: cond("MemoryLow", "available 3% of 64Gi")},
		{name: "a probe's finding that names the annotation later", c: cond("MemoryLow", "see [fault.selftaint.io/memory] drill")},
		{name: "another bracketed prefix", c: cond("MemoryLow", "[kernel] oom-killer invoked")},
		{name: "the prefix without the closing bracket", c: cond("MemoryLow", "[fault.selftaint.io/memory drill")},
		{name: "no target", c: cond("MemoryLow", "[fault.selftaint.io/] drill")},
		{name: "the custom reason of a fault, unmarked (an older agent): not known", c: cond("ChaosDrill", "pretend memory is short")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := faults.SetByFault(tt.c); got != tt.want {
				t.Errorf("SetByFault(%q, %q) = %v, want %v", tt.c.Reason, tt.c.Message, got, tt.want)
			}
			if key, ok := faults.MarkedBy(tt.c.Message); key != tt.wantKey || ok != (tt.wantKey != "") {
				t.Errorf("MarkedBy(%q) = %q, %v; want %q", tt.c.Message, key, ok, tt.wantKey)
			}
		})
	}
	if _, _, msg := f.State(); msg != "[fault.selftaint.io/memory] pretend memory is short" {
		t.Errorf("the fault's condition message = %q, want its message behind the mark", msg)
	}
}
