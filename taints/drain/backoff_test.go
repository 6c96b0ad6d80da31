package drain_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/selftaint/selftaint/taints/drain"
)

func TestBackoffSchedule(t *testing.T) {
	var b drain.Backoff
	now := t0
	var got []time.Duration
	for range 8 {
		if b.Waiting(now) {
			t.Fatalf("at %v still waiting until %v", now, b.Until)
		}
		b = b.Next(now)
		got = append(got, b.Until.Sub(now))
		if !b.Waiting(now) || !b.Waiting(b.Until.Add(-time.Nanosecond)) || b.Waiting(b.Until) {
			t.Fatalf("back-off until %v: waiting is wrong around it", b.Until)
		}
		now = b.Until
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute, time.Minute, time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestNextOp(t *testing.T) {
	waiting := drain.Backoff{Until: t0.Add(time.Second), Delay: 5 * time.Second}
	over := drain.Backoff{Until: t0, Delay: 5 * time.Second}
	tests := []struct {
		name  string
		st    drain.PodState
		force bool
		want  drain.Op
	}{
		{name: "new pod", want: drain.OpEvict},
		{name: "new pod, forced: evicted first", force: true, want: drain.OpEvict},
		{name: "refused, backing off", st: drain.PodState{Backoff: waiting, Refused: true, Last: drain.OpEvict}, want: drain.OpNone},
		{name: "refused, back-off over", st: drain.PodState{Backoff: over, Refused: true, Last: drain.OpEvict}, want: drain.OpEvict},
		{name: "failed, backing off", st: drain.PodState{Backoff: waiting, Last: drain.OpEvict}, want: drain.OpNone},
		{name: "failed, backing off, forced: not refused, so not deleted", st: drain.PodState{Backoff: waiting, Last: drain.OpEvict}, force: true, want: drain.OpNone},
		{name: "failed, back-off over, forced", st: drain.PodState{Backoff: over, Last: drain.OpEvict}, force: true, want: drain.OpEvict},
		{name: "refused, backing off, forced: deleted at once", st: drain.PodState{Backoff: waiting, Refused: true, Last: drain.OpEvict}, force: true, want: drain.OpDelete},
		{name: "delete failed, backing off", st: drain.PodState{Backoff: waiting, Refused: true, Last: drain.OpDelete}, force: true, want: drain.OpNone},
		{name: "delete failed, back-off over", st: drain.PodState{Backoff: over, Refused: true, Last: drain.OpDelete}, force: true, want: drain.OpDelete},
		{name: "delete failed, force withdrawn: evicted after back-off", st: drain.PodState{Backoff: over, Refused: true, Last: drain.OpDelete}, want: drain.OpEvict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := drain.NextOp(tt.st, tt.force, t0); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodStateAfter(t *testing.T) {
	pdb := &drain.Blocker{Pod: "ns/p", Kind: drain.KindPDB, PDB: "ns/b"}
	fail := &drain.Blocker{Pod: "ns/p", Kind: drain.KindError, Message: "boom"}
	first := drain.Backoff{Until: t0.Add(5 * time.Second), Delay: 5 * time.Second}
	second := drain.Backoff{Until: t0.Add(10 * time.Second), Delay: 10 * time.Second}
	tests := []struct {
		name     string
		st       drain.PodState
		op       drain.Op
		out      drain.Outcome
		b        *drain.Blocker
		want     drain.PodState
		wantDone bool
	}{
		{name: "evicted", op: drain.OpEvict, out: drain.Evicted, wantDone: true},
		{name: "deleted after refusals", st: drain.PodState{Backoff: first, Refused: true, Blocker: pdb}, op: drain.OpDelete, out: drain.Deleted, wantDone: true},
		{name: "vanished", st: drain.PodState{Backoff: first}, op: drain.OpEvict, out: drain.Vanished, wantDone: true},
		{name: "refused", op: drain.OpEvict, out: drain.Refused, b: pdb, want: drain.PodState{Backoff: first, Refused: true, Last: drain.OpEvict, Blocker: pdb}},
		{name: "refused again: doubles", st: drain.PodState{Backoff: first, Refused: true, Blocker: pdb}, op: drain.OpEvict, out: drain.Refused, b: pdb, want: drain.PodState{Backoff: second, Refused: true, Last: drain.OpEvict, Blocker: pdb}},
		{name: "failed", op: drain.OpEvict, out: drain.Failed, b: fail, want: drain.PodState{Backoff: first, Last: drain.OpEvict, Blocker: fail}},
		{name: "delete failed keeps refused", st: drain.PodState{Backoff: first, Refused: true, Blocker: pdb}, op: drain.OpDelete, out: drain.Failed, b: fail, want: drain.PodState{Backoff: second, Refused: true, Last: drain.OpDelete, Blocker: fail}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, done := tt.st.After(tt.op, tt.out, tt.b, t0)
			if done != tt.wantDone || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v, %v", got, done, tt.want, tt.wantDone)
			}
		})
	}
}

func TestOutcomeResultAndOpString(t *testing.T) {
	for o, want := range map[drain.Outcome]string{drain.Evicted: "evicted", drain.Deleted: "deleted", drain.Vanished: "gone", drain.Refused: "refused", drain.Failed: "failed"} {
		if got := o.Result(); got != want {
			t.Errorf("Outcome(%d).Result() = %q, want %q", o, got, want)
		}
	}
	for o, want := range map[drain.Op]string{drain.OpNone: "none", drain.OpEvict: "evict", drain.OpDelete: "delete"} {
		if got := o.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", o, got, want)
		}
	}
}
