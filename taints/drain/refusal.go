package drain

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the API server says when it refuses an eviction (the eviction
// subresource, pkg/registry/core/pod/storage/eviction.go), and what we
// say when a forced DELETE may not be made.
const (
	budgetPrefix = "The disruption budget "
	multiplePDBs = "more than one PodDisruptionBudget"
	pdbResource  = "poddisruptionbudget"
	// The RBAC a drain lacks, and where selftaint's opt-in manifests
	// grant it: the virtual fleet's coordinator's evictions in
	// deploy/virtual/drains/ (the coordinator's are in deploy/), forced
	// deletions in deploy/drain-force/. Each fits whole in a Summary's
	// quote of a failure (maxDetail).
	noDeletePermit = "no permission to delete pods (a forced drain needs RBAC pods delete: deploy/drain-force/)"
	noEvictPermit  = "no permission to evict pods (RBAC pods/eviction create; for selftaint virtual: deploy/virtual/drains/)"
	// What an admission policy's or webhook's refusal says (403 too).
	admissionRefusal = "refused by admission control"
	maxMessageLength = 256
)

// ClassifyError says how op on pod (namespace/name) came out, from the
// error the API returned (nil: accepted), and, for a refusal or a
// failure, the Blocker that says why the pod has not gone.
//
//   - 404, or 409 (the UID precondition failed: another pod took the
//     name): the pod is gone.
//   - 429 with a cause of type DisruptionBudget: refused by the budget
//     the cause names. A 429 without one is the API server's own
//     throttling: a failure, tried again after the back-off.
//   - The pod is covered by more than one PodDisruptionBudget (500), or
//     its budget is broken (403 on the poddisruptionbudget): refused,
//     as no later eviction gets past it either.
//   - 403 from an admission policy or webhook: failed, saying so; 403
//     otherwise: no permission (RBAC), naming the permission missing;
//     anything else: failed.
func ClassifyError(op Op, pod string, err error) (Outcome, *Blocker) {
	if err == nil {
		if op == OpDelete {
			return Deleted, nil
		}
		return Evicted, nil
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return Vanished, nil
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return Failed, &Blocker{Pod: pod, Kind: KindError, Message: bounded(err.Error())}
	}
	status := st.Status()
	if b := refusal(pod, status); b != nil {
		return Refused, b
	}
	msg := status.Message
	if status.Code == http.StatusForbidden {
		what := noEvictPermit
		switch {
		case byAdmission(msg):
			what = admissionRefusal
		case op == OpDelete:
			what = noDeletePermit
		}
		msg = what + ": " + msg
	}
	if msg == "" {
		msg = err.Error()
	}
	return Failed, &Blocker{Pod: pod, Kind: KindError, Message: bounded(msg)}
}

// byAdmission reports whether msg, a 403's, is an admission policy's or
// webhook's refusal (kube-apiserver's wording) rather than RBAC's.
func byAdmission(msg string) bool {
	return strings.Contains(msg, "ValidatingAdmissionPolicy '") || strings.Contains(msg, "admission webhook \"")
}

// refusal is the Blocker of a refusal by a PodDisruptionBudget, nil if
// status is not one.
func refusal(pod string, status metav1.Status) *Blocker {
	ns, _, _ := strings.Cut(pod, "/")
	switch {
	case status.Code == http.StatusTooManyRequests:
		if status.Details == nil {
			return nil
		}
		for _, c := range status.Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				b := ParseBudgetMessage(c.Message)
				b.Pod = pod
				if b.PDB != "" {
					b.PDB = ns + "/" + b.PDB
				}
				return &b
			}
		}
		return nil
	case status.Code == http.StatusInternalServerError && strings.Contains(status.Message, multiplePDBs):
		return &Blocker{Pod: pod, Kind: KindPDB, Message: bounded(status.Message)}
	case status.Code == http.StatusForbidden && status.Details != nil && strings.TrimSuffix(status.Details.Kind, "s") == pdbResource:
		return &Blocker{Pod: pod, Kind: KindPDB, PDB: ns + "/" + status.Details.Name, Message: bounded(status.Message)}
	}
	return nil
}

// ParseBudgetMessage reads the message of a DisruptionBudget cause: "The
// disruption budget NAME needs D healthy pods and has C currently" gives
// the budget's name, both counts and DisruptionsAllowed = C-D (at least
// 0); "The disruption budget NAME is still being processed by the
// server." and the API server's other forms give the name, and
// DisruptionsAllowed 0 (a refusal means it allows none now). The Blocker
// has KindPDB and Message; its Pod is left to the caller, and its PDB is
// the bare name (the budget is in the pod's namespace).
func ParseBudgetMessage(msg string) Blocker {
	b := Blocker{Kind: KindPDB, Message: bounded(msg)}
	rest, ok := strings.CutPrefix(msg, budgetPrefix)
	if !ok {
		return b
	}
	name, rest, _ := strings.Cut(rest, " ")
	b.PDB = name
	var desired, current int
	if n, err := fmt.Sscanf(rest, "needs %d healthy pods and has %d currently", &desired, &current); err == nil && n == 2 {
		b.Counted = true
		b.DesiredHealthy, b.CurrentHealthy = desired, current
		b.DisruptionsAllowed = max(current-desired, 0)
	}
	return b
}

// bounded cuts s to maxMessageLength bytes.
func bounded(s string) string { return truncate(s, maxMessageLength) }

// truncate cuts s to at most n bytes, on a rune boundary, ending it with
// "…" where it cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
