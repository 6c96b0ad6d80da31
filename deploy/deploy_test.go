package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/testcp"
)

// The names the manifests agree on.
const (
	// namespace is selftaint's own (namespace.yaml): everything in deploy/
	// but the Events Roles in default.
	namespace     = "selftaint"
	agentSA       = "selftaint"
	virtualSA     = "selftaint-virtual"
	coordinatorSA = "selftaint-coordinator"
	configMapName = "selftaint-config"
	policyName    = "selftaint-own-node"
	image         = "ghcr.io/selftaint/selftaint:latest"
	// nodeNameExtra is the user extra key that names the node a pod-bound
	// service-account token belongs to (k8s.io/apiserver's
	// serviceaccount.NodeNameKey).
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// manifestDirs are the kustomization directories, relative to deploy/,
// that the shared control plane has installed.
var manifestDirs = []string{".", "virtual"}

// allManifestDirs adds the opt-in kustomizations, which tests install
// themselves (drain-force/: testDrainForce; virtual/drains/:
// testVirtualDrain).
var allManifestDirs = append(slices.Clone(manifestDirs), drainForceDir, virtualDrainsDir)

// kinds are the objects the manifests may hold, decoded into their typed
// API structs so an unknown or misspelt field fails the test.
var kinds = map[schema.GroupVersionKind]func() runtime.Object{
	corev1.SchemeGroupVersion.WithKind("Namespace"):                                  func() runtime.Object { return &corev1.Namespace{} },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):                             func() runtime.Object { return &corev1.ServiceAccount{} },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):                                  func() runtime.Object { return &corev1.ConfigMap{} },
	corev1.SchemeGroupVersion.WithKind("ResourceQuota"):                              func() runtime.Object { return &corev1.ResourceQuota{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"):                                func() runtime.Object { return &rbacv1.ClusterRole{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"):                         func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
	rbacv1.SchemeGroupVersion.WithKind("Role"):                                       func() runtime.Object { return &rbacv1.Role{} },
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"):                                func() runtime.Object { return &rbacv1.RoleBinding{} },
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"):                                  func() runtime.Object { return &appsv1.DaemonSet{} },
	appsv1.SchemeGroupVersion.WithKind("Deployment"):                                 func() runtime.Object { return &appsv1.Deployment{} },
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"):                      func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"): func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
	admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"): func() runtime.Object {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	},
}

// manifest is one object from one file.
type manifest struct {
	file string // relative to deploy/, e.g. virtual/rbac.yaml
	obj  runtime.Object
}

func (m manifest) kind() string { return m.obj.GetObjectKind().GroupVersionKind().Kind }

func (m manifest) meta() metav1.Object {
	o, err := meta.Accessor(m.obj)
	if err != nil {
		panic(err) // every kind above has ObjectMeta
	}
	return o
}

func (m manifest) String() string {
	o := m.meta()
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s (%s)", m.kind(), o.GetNamespace(), o.GetName(), m.file)
	}
	return fmt.Sprintf("%s %s (%s)", m.kind(), o.GetName(), m.file)
}

// kustomization is the part of a kustomization.yaml these manifests use.
// Decoding is strict: a field the test does not know (namespace:,
// patches:, ...) fails it, since the tests apply the files as they are.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	// Configurations are transformer configs (files beside it, not objects).
	Configurations []string `json:"configurations"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s/kustomization.yaml: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", dir, k.APIVersion, k.Kind)
	}
	return k
}

// splitDocuments splits a YAML stream at "---" lines and drops documents
// that hold only comments and blank lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	content := false
	flush := func() {
		if content {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
		content = false
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "---" {
			flush()
			continue
		}
		if trimmed != "" && !strings.HasPrefix(trimmed, "#") {
			content = true
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// decodeFile decodes every document of file (relative to deploy/) strictly
// into its typed object.
func decodeFile(file string) ([]manifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	docs := splitDocuments(data)
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no objects", file)
	}
	var out []manifest
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		newObj, ok := kinds[tm.GroupVersionKind()]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: unexpected kind %s %s (add it to the test's kinds if it belongs)", file, i+1, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", file, i+1, tm.Kind, err)
		}
		out = append(out, manifest{file: file, obj: obj})
	}
	return out, nil
}

// readManifests returns the objects of dir's kustomization, in its order.
func readManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	var out []manifest
	for _, r := range readKustomization(t, dir).Resources {
		ms, err := decodeFile(path.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ms...)
	}
	return out
}

// find returns the one object of kind named name in ms.
func find[T runtime.Object](t *testing.T, ms []manifest, name string) T {
	t.Helper()
	var found []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok && m.meta().GetName() == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T named %s, want 1", len(found), zero, name)
	}
	return found[0]
}

// TestKustomizationsListEveryFile checks each kustomization.yaml lists
// exactly the manifest files beside it, once each.
func TestKustomizationsListEveryFile(t *testing.T) {
	for _, dir := range allManifestDirs {
		k := readKustomization(t, dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) && name != "kustomization.yaml" {
				files = append(files, name)
			}
		}
		listed := slices.Concat(k.Resources, k.Configurations)
		slices.Sort(listed)
		if dup := len(listed) - len(slices.Compact(slices.Clone(listed))); dup > 0 {
			t.Errorf("%s/kustomization.yaml lists %d file(s) twice: %v", dir, dup, k.Resources)
		}
		listed = slices.Compact(listed)
		slices.Sort(files)
		if !slices.Equal(listed, files) {
			t.Errorf("%s/kustomization.yaml resources %v, want exactly the files there: %v", dir, listed, files)
		}
	}
}

// TestManifestsDecodeStrictly decodes every manifest into its typed object,
// rejecting unknown and duplicate fields, and checks that no object is
// declared twice.
func TestManifestsDecodeStrictly(t *testing.T) {
	seen := map[string]string{}
	for _, dir := range allManifestDirs {
		ms := readManifests(t, dir)
		if len(ms) == 0 {
			t.Errorf("%s: no objects", dir)
		}
		for _, m := range ms {
			o := m.meta()
			if o.GetName() == "" {
				t.Errorf("%s: no name", m)
			}
			key := m.kind() + " " + o.GetNamespace() + "/" + o.GetName()
			if prev, dup := seen[key]; dup {
				t.Errorf("%s is declared in %s and %s", key, prev, m.file)
			}
			seen[key] = m.file
			if got := o.GetLabels()["app.kubernetes.io/name"]; got != "selftaint" {
				t.Errorf("%s: label app.kubernetes.io/name=%q, want selftaint", m, got)
			}
		}
	}
	// A manifest that is not valid must fail: the decoder is really strict.
	bad := []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n")
	if err := yaml.UnmarshalStrict(bad, &appsv1.DaemonSet{}); err == nil {
		t.Error("strict decoding accepted a misspelt field")
	}
}

// TestManifestsAgree checks the cross-references between files: names,
// namespaces, the service account the policy matches, the config path.
func TestManifestsAgree(t *testing.T) {
	ms := readManifests(t, ".")
	for _, m := range ms {
		if ns := m.meta().GetNamespace(); ns != "" && ns != namespace && !(m.kind() == "Role" || m.kind() == "RoleBinding") {
			t.Errorf("%s: namespace %s, want %s", m, ns, namespace)
		}
	}
	// The namespace is created first, for the Pod Security level the
	// agent needs.
	if first := ms[0]; first.kind() != "Namespace" || first.meta().GetName() != namespace {
		t.Errorf("the first object is %s, want Namespace %s", first, namespace)
	}
	if ns := find[*corev1.Namespace](t, ms, namespace); ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("Namespace %s labels %v, want pod-security.kubernetes.io/enforce=privileged (the agent's hostNetwork and hostPath)", namespace, ns.Labels)
	}
	sa := find[*corev1.ServiceAccount](t, ms, agentSA)
	if sa.Namespace != namespace {
		t.Errorf("service account in %s, want %s", sa.Namespace, namespace)
	}
	cm := find[*corev1.ConfigMap](t, ms, configMapName)
	if _, ok := cm.Data["config.yaml"]; !ok {
		t.Errorf("ConfigMap %s has no config.yaml", configMapName)
	}

	ds := find[*appsv1.DaemonSet](t, ms, "selftaint")
	pod := ds.Spec.Template.Spec
	if pod.ServiceAccountName != agentSA {
		t.Errorf("DaemonSet service account %q, want %q", pod.ServiceAccountName, agentSA)
	}
	var cmVolume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			if v.ConfigMap.Name != configMapName {
				t.Errorf("volume %s mounts ConfigMap %s, want %s", v.Name, v.ConfigMap.Name, configMapName)
			}
			cmVolume = v.Name
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if want := []string{"agent", "--config=/etc/selftaint/config.yaml", "--host-root=/host"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %v, want %v", c.Args, want)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts["/etc/selftaint"]; m.Name != cmVolume || !m.ReadOnly {
		t.Errorf("/etc/selftaint mount %+v, want the ConfigMap volume %q read-only", m, cmVolume)
	}
	if m := mounts["/host"]; !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("/host mount %+v, want read-only with HostToContainer propagation", m)
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && (v.HostPath.Path != "/" || mounts["/host"].Name != v.Name) {
			t.Errorf("hostPath volume %s (%s): only / at /host is expected", v.Name, v.HostPath.Path)
		}
	}

	// The policy matches the agent's service account by name in any
	// namespace (a namespace overlay keeps it in force), and its binding
	// names it.
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, policyName)
	wantMatch := []admissionregistrationv1.MatchCondition{{
		Name:       "selftaint-service-account",
		Expression: "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + agentSA + "')",
	}}
	if !slices.Equal(vap.Spec.MatchConditions, wantMatch) {
		t.Errorf("policy match conditions %+v, want one matching service account %s in any namespace", vap.Spec.MatchConditions, agentSA)
	}
	// The policy is its own parameter object: it can never be in force
	// without its parameters (a missing one would deny every user's Node
	// writes).
	if pk := vap.Spec.ParamKind; pk == nil || pk.APIVersion != "admissionregistration.k8s.io/v1" || pk.Kind != "ValidatingAdmissionPolicy" {
		t.Errorf("policy paramKind %+v, want the policy itself (admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy)", pk)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("policy failurePolicy %v, want Fail", vap.Spec.FailurePolicy)
	}
	binding := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, ms, policyName)
	if binding.Spec.PolicyName != policyName || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v, want policy %s with action Deny", binding.Spec, policyName)
	}
	if p := binding.Spec.ParamRef; p == nil || p.Name != policyName || p.Namespace != "" || p.Selector != nil ||
		p.ParameterNotFoundAction == nil || *p.ParameterNotFoundAction != admissionregistrationv1.DenyAction {
		t.Errorf("binding paramRef %+v, want the policy %s itself, denying when it is missing", binding.Spec.ParamRef, policyName)
	}

	// Every binding's subject is the agent's service account, but the
	// coordinator's bindings' (named after it), which are its own.
	checkSubjects(t, ms, namespace, func(binding string) string {
		if strings.HasPrefix(binding, coordinatorSA) {
			return coordinatorSA
		}
		return agentSA
	})
	checkCoordinatorPolicy(t, ms)
}

// checkSubjects checks every binding in ms binds exactly the service
// account saFor names for it, in namespace ns.
func checkSubjects(t *testing.T, ms []manifest, ns string, saFor func(binding string) string) {
	t.Helper()
	for _, m := range ms {
		sa := saFor(m.meta().GetName())
		var subjects []rbacv1.Subject
		switch o := m.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects = o.Subjects
		case *rbacv1.RoleBinding:
			subjects = o.Subjects
		default:
			continue
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
		if !slices.Equal(subjects, want) {
			t.Errorf("%s: subjects %+v, want %+v", m, subjects, want)
		}
	}
}

// TestDaemonSetSpec pins what the DaemonSet must say for the agent to do
// its job on sick nodes, with no privileges.
func TestDaemonSetSpec(t *testing.T) {
	ds := find[*appsv1.DaemonSet](t, readManifests(t, "."), "selftaint")
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("image", c.Image, image)
	check("hostNetwork", pod.HostNetwork, true)
	check("dnsPolicy", pod.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
	check("hostPID", pod.HostPID, false)
	check("shareProcessNamespace", pod.ShareProcessNamespace != nil && *pod.ShareProcessNamespace, false)
	check("priorityClassName", pod.PriorityClassName, "system-node-critical")
	check("tolerations", pod.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}})
	check("updateStrategy", ds.Spec.UpdateStrategy.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "10%" {
		t.Errorf("rollingUpdate %+v, want maxUnavailable 10%%", ru)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME %+v, want the downward API's spec.nodeName", e)
	}
	check("NVIDIA_VISIBLE_DEVICES", env["NVIDIA_VISIBLE_DEVICES"].Value, "all")
	check("NVIDIA_DRIVER_CAPABILITIES", env["NVIDIA_DRIVER_CAPABILITIES"].Value, "utility")
	for _, q := range []struct {
		what string
		got  *resource.Quantity
		want string
	}{
		{"cpu request", c.Resources.Requests.Cpu(), "10m"},
		{"memory request", c.Resources.Requests.Memory(), "40Mi"},
		{"memory limit", c.Resources.Limits.Memory(), "100Mi"},
	} {
		if q.got.Cmp(resource.MustParse(q.want)) != 0 {
			t.Errorf("%s = %s, want %s", q.what, q.got, q.want)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit set; throttling would delay probes on a busy node")
	}
	// The liveness and readiness probes: TestDaemonSetHealthProbes.

	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("pod or container securityContext missing")
	}
	check("runAsNonRoot", psc.RunAsNonRoot != nil && *psc.RunAsNonRoot, true)
	check("runAsUser", psc.RunAsUser != nil && *psc.RunAsUser == 65532, true)
	check("seccompProfile", psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, true)
	check("readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, true)
	check("allowPrivilegeEscalation", sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation, false)
	check("privileged", sc.Privileged != nil && *sc.Privileged, false)
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop ALL and add none", sc.Capabilities)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/tmp" && !m.ReadOnly {
			t.Errorf("mount %s is writable", m.MountPath)
		}
	}
}

// TestNoWildcardsOrSecrets checks no role grants "*" or anything on secrets.
func TestNoWildcardsOrSecrets(t *testing.T) {
	for _, dir := range allManifestDirs {
		for _, m := range readManifests(t, dir) {
			var rules []rbacv1.PolicyRule
			switch o := m.obj.(type) {
			case *rbacv1.ClusterRole:
				rules = o.Rules
			case *rbacv1.Role:
				rules = o.Rules
			default:
				continue
			}
			for _, r := range rules {
				all := slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs)
				if slices.Contains(all, "*") || slices.Contains(r.Resources, "secrets") {
					t.Errorf("%s: rule %+v grants a wildcard or secrets", m, r)
				}
			}
		}
	}
}

// restrictedAdmission is an API server's admission configuration as strict
// as clusters get about what deploy/ needs: Pod Security "restricted" for
// every namespace whose labels do not say otherwise, and pods at the system
// priority classes admitted only where a ResourceQuota covers them (GKE's
// default, "limit priority class consumption by default").
const restrictedAdmission = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: restricted, enforce-version: latest}
    exemptions: {}
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
`

// TestPodsAdmittedInNamespace creates deploy/ on an API server with
// restrictedAdmission (and the quota controller, which counts the quota's
// use) and checks the agent's and the coordinator's pods, as their
// DaemonSet and Deployment would make them, are admitted in selftaint's
// namespace (dry runs): the Namespace's Pod Security label lets the agent's
// hostNetwork and hostPath in, its ResourceQuota the system priority
// classes outside kube-system. The same pods in a namespace without them
// are refused, which shows the configuration is in force. Then
// deploy/kernel-log/'s changes are applied over deploy/ and its privileged
// agent's pod is admitted there too, and refused elsewhere.
func TestPodsAdmittedInNamespace(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd, kube-apiserver and kube-controller-manager")
	t.Parallel()
	config := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(config, []byte(restrictedAdmission), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := testcp.Start(t, testcp.Options{
		APIServerArgs:         []string{"--admission-control-config-file=" + config},
		ControllerManager:     true,
		ControllerManagerArgs: []string{"--controllers=resourcequota"},
	})
	admin := cp.Client()
	ctx := t.Context()
	ms := readManifests(t, ".")
	createManifests(t, admin, ms)
	const plain = "plain"
	createNamespace(t, admin, plain)
	ds := find[*appsv1.DaemonSet](t, ms, "selftaint")
	d := find[*appsv1.Deployment](t, ms, coordinatorSA)
	for _, p := range []struct {
		name string
		spec corev1.PodSpec
	}{{"agent", ds.Spec.Template.Spec}, {"coordinator", d.Spec.Template.Spec}} {
		create := func(ns string) error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name}, Spec: *p.spec.DeepCopy()}
			_, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		// The quota controller first counts the quota's use.
		poll(t, time.Minute, "the "+p.name+"'s pod admitted in "+namespace, func() (bool, error) {
			err := create(namespace)
			return err == nil, err
		})
		// Refused by Pod Security (the agent) or by the quota admission.
		if err := create(plain); err == nil || !apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "insufficient quota") {
			t.Errorf("the %s's pod in a namespace without the label and quota: %v, want it refused", p.name, err)
		}
	}

	// deploy/kernel-log/ applied over it: its objects validate, and its
	// privileged root agent is admitted in selftaint's namespace, and only
	// there.
	changed := kernelLogChanges(t)
	updateManifests(t, admin, changed)
	spec := find[*appsv1.DaemonSet](t, changed, "selftaint").Spec.Template.Spec
	for ns, admit := range map[string]bool{namespace: true, plain: false} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-kernel-log"}, Spec: *spec.DeepCopy()}
		_, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if admit && err != nil || !admit && !apierrors.IsForbidden(err) {
			t.Errorf("the agent's pod with the kernel log in %s: %v, want admitted %v", ns, err, admit)
		}
	}
}
