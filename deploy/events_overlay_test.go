package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent/testcp"
)

// eventsInDefaultDir is the transformer a namespace overlay of deploy/
// lists (README, "Running the agent") to keep the Events Roles in
// "default".
const eventsInDefaultDir = "events-in-default"

// eventsObjects are deploy/'s objects in "default", as kind/name: the
// Events Roles of the agent and the coordinator, and their bindings.
var eventsObjects = []string{
	"Role/selftaint-events", "RoleBinding/selftaint-events",
	"Role/selftaint-coordinator-events", "RoleBinding/selftaint-coordinator-events",
}

// namespaceOverlay renders deploy/ as the README's namespace overlay into
// ns does: `namespace: ns` and the transformer eventsInDefaultDir.
func namespaceOverlay(t *testing.T, ns string) []manifest {
	t.Helper()
	return decodeRendered(t, renderOverlay(t, ".", "namespace: "+ns, []string{eventsInDefaultDir}, nil))
}

// byKindName indexes ms by kind/name (deploy/'s names are unique per kind).
func byKindName(t *testing.T, ms []manifest) map[string]manifest {
	t.Helper()
	out := map[string]manifest{}
	for _, m := range ms {
		k := m.kind() + "/" + m.meta().GetName()
		if _, dup := out[k]; dup {
			t.Fatalf("two objects %s", k)
		}
		out[k] = m
	}
	return out
}

// sameObject reports whether a and b are the same object, as JSON.
func sameObject(t *testing.T, a, b manifest) bool {
	t.Helper()
	ja, err := json.Marshal(a.obj)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b.obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// TestEventsInDefaultRendering renders deploy/ through overlays with and
// without the transformer events-in-default: a plain `namespace:` overlay
// moves the Events Roles out of "default" (why the transformer exists);
// with it, exactly those four are back in "default", their bindings'
// subjects are the service accounts in the overlay's namespace (under a
// namePrefix too), and every other object is what the plain overlay
// renders; without a namespace overlay it changes nothing.
func TestEventsInDefaultRendering(t *testing.T) {
	base := byKindName(t, kustomizeOverlay(t, ".", ""))
	for _, k := range eventsObjects {
		if m, ok := base[k]; !ok || m.meta().GetNamespace() != metav1.NamespaceDefault {
			t.Fatalf("deploy/ has no %s in default", k)
		}
	}
	for k, m := range byKindName(t, decodeRendered(t, renderOverlay(t, ".", "", []string{eventsInDefaultDir}, nil))) {
		if !sameObject(t, m, base[k]) {
			t.Errorf("%s: changed by %s without a namespace overlay", k, eventsInDefaultDir)
		}
	}
	const ns = "selftaint-system"
	for _, prefix := range []string{"", "p-"} {
		line := "namespace: " + ns + "\nnamePrefix: " + prefix
		plain := byKindName(t, kustomizeOverlay(t, ".", line))
		fixed := byKindName(t, decodeRendered(t, renderOverlay(t, ".", line, []string{eventsInDefaultDir}, nil)))
		if len(fixed) != len(plain) {
			t.Errorf("prefix %q: %d objects with %s, %d without", prefix, len(fixed), eventsInDefaultDir, len(plain))
		}
		for k, m := range fixed {
			if !slices.Contains(eventsObjects, m.kind()+"/"+m.meta().GetName()[len(prefix):]) {
				if !sameObject(t, m, plain[k]) {
					t.Errorf("prefix %q: %s changed by %s", prefix, k, eventsInDefaultDir)
				}
				continue
			}
			if got := plain[k].meta().GetNamespace(); got != ns {
				t.Errorf("prefix %q: the plain overlay put %s in %q, want %q (kustomize's namespace: moves every namespaced object)", prefix, k, got, ns)
			}
			if got := m.meta().GetNamespace(); got != metav1.NamespaceDefault {
				t.Errorf("prefix %q: %s in %q, want default", prefix, k, got)
			}
			if rb, ok := m.obj.(*rbacv1.RoleBinding); ok {
				want := plain[k].obj.(*rbacv1.RoleBinding).Subjects
				if !slices.Equal(rb.Subjects, want) || len(want) != 1 || want[0].Namespace != ns || want[0].Name[:len(prefix)] != prefix {
					t.Errorf("prefix %q: %s subjects %+v, want the plain overlay's %+v (service accounts in %s)", prefix, k, rb.Subjects, want, ns)
				}
			}
		}
	}
}

// nodeEvent is an Event about node in ns, as client-go's recorder writes
// one.
func nodeEvent(ns, name, node string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Reason:         "TaintAdded",
		Message:        "added taint selftaint.io/memory-pressure:NoSchedule",
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "selftaint", Host: node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
}

// mayCreateEvents asks the API server's authorizer whether user (a
// service account) may create Events in ns.
func mayCreateEvents(ctx context.Context, admin kubernetes.Interface, user, ns string) (bool, error) {
	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: saGroups(user),
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: ns, Version: "v1"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// overlayIdentities are the agent's and the coordinator's service
// accounts in ns, as users and clients.
func overlayIdentities(t *testing.T, cp *testcp.ControlPlane, ns, node string) map[string]kubernetes.Interface {
	t.Helper()
	agent, err := kubernetes.NewForConfig(asServiceAccountIn(cp, ns, agentSA, node))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]kubernetes.Interface{
		"system:serviceaccount:" + ns + ":" + agentSA:       agent,
		"system:serviceaccount:" + ns + ":" + coordinatorSA: coordinatorClient(t, cp, ns),
	}
}

// testPlainOverlayEvents runs on cp, where deploy/ is installed through a
// plain `namespace: ns` overlay (without events-in-default): the API
// server refuses a Node's Event outside "default" (so the Events must stay
// there), the agent's and the coordinator's tokens may create Events in
// ns (the moved Roles, in force) but not in "default": their Node Events
// are refused (403). Then it installs what the overlay with
// events-in-default adds, the Events objects in "default", and their Node
// Events go through (waitNodeEventsAllowed).
func testPlainOverlayEvents(t *testing.T, cp *testcp.ControlPlane, ns string) {
	t.Helper()
	ctx := t.Context()
	admin := cp.Client()
	const node = "overlay-events"
	_, err := admin.CoreV1().Events(ns).Create(ctx, nodeEvent(ns, node+".admin", node), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("admin: a Node's Event in %s: %v, want Invalid (a Node's Events belong in default)", ns, err)
	}
	ids := overlayIdentities(t, cp, ns, node)
	for user, c := range ids {
		poll(t, time.Minute, user+" allowed Events in "+ns+" (the plain overlay's Roles in force)", func() (bool, error) {
			return mayCreateEvents(ctx, admin, user, ns)
		})
		attack{"plain overlay: " + user + " creates a Node's Event in default", func(ctx context.Context) error {
			_, err := c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, nodeEvent(metav1.NamespaceDefault, node+".plain", node), metav1.CreateOptions{})
			return err
		}, byRBAC, ""}.check(t)
	}
	var inDefault []manifest
	for _, m := range namespaceOverlay(t, ns) {
		if m.meta().GetNamespace() == metav1.NamespaceDefault {
			inDefault = append(inDefault, m)
		}
	}
	if len(inDefault) != len(eventsObjects) {
		t.Fatalf("the overlay with %s puts %d objects in default, want %d: %v", eventsInDefaultDir, len(inDefault), len(eventsObjects), inDefault)
	}
	createManifests(t, admin, inDefault)
	waitNodeEventsAllowed(t, cp, ns)
}

// waitNodeEventsAllowed waits until the agent's and the coordinator's
// service accounts in ns may create an Event about a Node in "default", as
// their recorders do, and patches it (how a recorder counts a repeat);
// neither may create Events in kube-public, where it has no Role.
func waitNodeEventsAllowed(t *testing.T, cp *testcp.ControlPlane, ns string) {
	t.Helper()
	ctx := t.Context()
	admin := cp.Client()
	const node = "overlay-events"
	i := 0
	for user, c := range overlayIdentities(t, cp, ns, node) {
		i++
		name := fmt.Sprintf("%s.%s.%d", node, ns, i)
		events := c.CoreV1().Events(metav1.NamespaceDefault)
		poll(t, time.Minute, user+" to create a Node's Event in default", func() (bool, error) {
			_, err := events.Create(ctx, nodeEvent(metav1.NamespaceDefault, name, node), metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err), err
		})
		patch := fmt.Sprintf(`{"count":2,"lastTimestamp":%q}`, time.Now().UTC().Format(time.RFC3339))
		if _, err := events.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Errorf("%s: patching its Node's Event in default: %v", user, err)
		}
		if ok, err := mayCreateEvents(ctx, admin, user, metav1.NamespacePublic); err != nil || ok {
			t.Errorf("%s: may create Events in %s: %v, %v; want not", user, metav1.NamespacePublic, ok, err)
		}
	}
}
