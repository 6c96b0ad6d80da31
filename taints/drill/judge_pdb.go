package drill

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// pdbTrack follows one PDB through its versions.
type pdbTrack struct {
	key        string
	known      bool
	violated   bool
	since      time.Time
	total      time.Duration
	count      int
	versions   int
	minHealthy int32
	minDesired int32
	first      *PDBViolation
}

// pdb judges a PDBExpect: from t=0 on, no known version of the PDB (of
// every PDB when Name is empty) with fewer healthy pods than desired.
func (ev *evaluator) pdb(e *PDBExpect) Result {
	ns := ev.namespace(e.Namespace)
	tracks := map[string]*pdbTrack{}
	var keys []string
	// pre holds each PDB's last version before t=0: its state at t=0.
	pre := map[string]PDBVersion{}
	for _, v := range ev.pdbs {
		if (e.Name != "" && v.Name != e.Name) || !nsMatch(ns, v.Namespace) {
			continue
		}
		key := v.Namespace + "/" + v.Name
		t := tracks[key]
		if t == nil {
			t = &pdbTrack{key: key}
			tracks[key] = t
			keys = append(keys, key)
		}
		if v.Time.Before(ev.rec.Start) {
			pre[key] = v
			continue
		}
		if p, ok := pre[key]; ok {
			delete(pre, key)
			ev.pdbStep(t, p, ev.rec.Start)
		}
		ev.pdbStep(t, v, v.Time)
	}
	for key, p := range pre { // no version since t=0
		ev.pdbStep(tracks[key], p, ev.rec.Start)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		if e.Name != "" {
			return failed("the disruption controller never reported PDB %s", qualify(ns, e.Name))
		}
		return failed("no PodDisruptionBudget seen%s: nothing guards the pods", inNamespace(ns))
	}
	return ev.pdbResult(keys, tracks)
}

func (ev *evaluator) pdbStep(t *pdbTrack, v PDBVersion, at time.Time) {
	if !v.Known {
		return
	}
	if !t.known || v.Healthy < t.minHealthy {
		t.minHealthy, t.minDesired = v.Healthy, v.Desired
	}
	t.known = true
	t.versions++
	bad := v.Healthy < v.Desired
	switch {
	case bad && !t.violated:
		t.violated, t.since = true, at
		t.count++
		if t.first == nil {
			t.first = &PDBViolation{AtSeconds: ev.at(at), PDB: t.key, Cause: v.Cause,
				ResourceVersion: v.ResourceVersion, Healthy: v.Healthy, Desired: v.Desired}
		}
	case !bad && t.violated:
		t.violated = false
		t.total += at.Sub(t.since)
	}
}

func (ev *evaluator) pdbResult(keys []string, tracks map[string]*pdbTrack) Result {
	var total time.Duration
	count, versions := 0, 0
	var first *PDBViolation
	var minHealthy, minDesired int32 = -1, 0
	var unknown []string
	for _, k := range keys {
		t := tracks[k]
		if !t.known {
			unknown = append(unknown, k)
			continue
		}
		if t.violated {
			total += ev.rec.End.Sub(t.since)
		}
		total += t.total
		count += t.count
		versions += t.versions
		if t.first != nil && (first == nil || t.first.AtSeconds < first.AtSeconds) {
			first = t.first
		}
		if minHealthy < 0 || t.minHealthy < minHealthy {
			minHealthy, minDesired = t.minHealthy, t.minDesired
		}
	}
	m := Measured{PDBs: keys, ViolationSeconds: ptr(seconds(total)), Violations: ptr(count), FirstViolation: first}
	if minHealthy >= 0 {
		m.MinHealthy = ptr(minHealthy)
	}
	res := Result{Measured: m}
	switch {
	case len(unknown) > 0:
		res.Message = fmt.Sprintf("the disruption controller never reported PDB %s", strings.Join(unknown, ", "))
	case first != nil:
		res.Message = fmt.Sprintf("PDB below its minimum for %.1fs (%d %s), expected never; first: %s at %.1fs, %d/%d healthy, after %s changed (resourceVersion %s)",
			seconds(total), count, plural(count, "time", "times"), first.PDB, first.AtSeconds,
			first.Healthy, first.Desired, first.Cause, first.ResourceVersion)
	default:
		res.Passed = true
		res.Message = fmt.Sprintf("PDB %s never below its minimum (fewest healthy %d, desired %d, over %d versions)",
			strings.Join(keys, ", "), minHealthy, minDesired, versions)
	}
	return res
}

func qualify(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}
