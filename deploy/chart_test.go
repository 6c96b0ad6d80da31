package deploy_test

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/selftaint/selftaint/agent/testcp"
)

const (
	// chartDir is the Helm chart, relative to deploy/.
	chartDir = "chart"
	// testKubeVersion is the Kubernetes version the chart is rendered
	// for: the Makefile's KUBE_VERSION, which the tests' control plane runs.
	testKubeVersion = "v1.35.4"
)

// object is one rendered object, decoded generically (the chart may render
// kinds the typed decoding does not know: the Prometheus operator's).
type object map[string]any

// key is how two renderings' objects are matched: kind, namespace, name.
func (o object) key() string {
	meta, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v/%v", o["kind"], meta["namespace"], meta["name"])
}

// decodeObjects decodes a YAML stream into its objects, keyed.
func decodeObjects(t *testing.T, what string, stream []byte) map[string]object {
	t.Helper()
	out := map[string]object{}
	for i, doc := range splitDocuments(stream) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: document %d: %v", what, i+1, err)
		}
		if len(o) == 0 {
			continue
		}
		if _, dup := out[o.key()]; dup {
			t.Fatalf("%s: %s twice", what, o.key())
		}
		out[o.key()] = o
	}
	return out
}

// renderChart renders the chart with values as `helm template` does
// (helm's engine, after the values are checked against
// values.schema.json), or returns helm's error.
func renderChart(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	ch, err := loadChart()
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return renderLoaded(t, ch, values)
}

// loadChart loads the chart once: helm logs a line for each link it
// follows on every load. Rendering does not change the loaded chart.
var loadChart = sync.OnceValues(func() (*chart.Chart, error) { return loader.Load(chartDir) })

// renderLoaded is renderChart for a chart helm has loaded.
func renderLoaded(t *testing.T, ch *chart.Chart, values map[string]any) (string, error) {
	t.Helper()
	// helm template's default is Kubernetes 1.20: the version the tests'
	// control plane runs instead.
	kv, err := chartutil.ParseKubeVersion(testKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		t.Fatalf("the chart's kubeVersion %s excludes Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "selftaint", Namespace: "default", IsInstall: true}, caps)
	if err != nil {
		return "", err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if filepath.Ext(name) == ".yaml" {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, files[name])
		}
	}
	return out.String(), nil
}

// mustRender renders the chart with values, failing t on an error.
func mustRender(t *testing.T, values map[string]any) map[string]object {
	t.Helper()
	out, err := renderChart(t, values)
	if err != nil {
		t.Fatalf("helm template with %v: %v", values, err)
	}
	return decodeObjects(t, "the chart", []byte(out))
}

// kustomizeBuild renders the kustomization in dir (relative to deploy/).
func kustomizeBuild(t *testing.T, dir string) map[string]object {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, "kustomize build "+dir, out)
}

// union is the objects of several renderings together.
func union(sets ...map[string]object) map[string]object {
	out := map[string]object{}
	for _, s := range sets {
		maps.Copy(out, s)
	}
	return out
}

// checkSameObjects fails t unless got and want hold the same objects,
// field by field (compared with opts).
func checkSameObjects(t *testing.T, what string, got, want map[string]object, opts ...cmp.Option) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: no %s", what, k)
			continue
		}
		if d := cmp.Diff(want[k], g, opts...); d != "" {
			t.Errorf("%s: %s differs (-want +got):\n%s", what, k, d)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s is extra", what, k)
		}
	}
}

// blankLinesIgnored compares strings without their blank lines. kustomize
// writes YAML with go-yaml v3, which puts a blank line before each more
// indented line of a folded scalar (>-: the admission policies' CEL); read
// back by sigs.k8s.io/yaml (go-yaml v2), as kubectl does, that line stays
// in the string. Whitespace between CEL tokens means nothing.
var blankLinesIgnored = cmp.Comparer(func(a, b string) bool { return dropBlankLines(a) == dropBlankLines(b) })

func dropBlankLines(s string) string {
	for strings.Contains(s, "\n\n") {
		s = strings.ReplaceAll(s, "\n\n", "\n")
	}
	return s
}

// fileObjects decodes the objects of dir's kustomization (relative to
// deploy/) from its files, as kubectl apply -f would send them.
func fileObjects(t *testing.T, dir string) map[string]object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	out := map[string]object{}
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(out, decodeObjects(t, filepath.Join(dir, r), data))
	}
	return out
}

// renderManifests renders the chart with values and decodes the objects
// strictly into their typed API structs, as readManifests does the files.
func renderManifests(t *testing.T, values map[string]any) []manifest {
	t.Helper()
	out, err := renderChart(t, values)
	if err != nil {
		t.Fatalf("helm template with %v: %v", values, err)
	}
	file := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := decodeFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestChartLint runs helm lint (helm's Go module) on the chart with its
// defaults and with every value overridden: no warning, no error. A bad
// value is an error there too.
func TestChartLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(testKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		values map[string]any
		bad    bool
	}{
		{"defaults", nil, false},
		{"overrides", chartOverrides(), false},
		{"negative replicas", map[string]any{"coordinator": map[string]any{"replicas": -1}}, true},
	} {
		linter := lint.AllWithKubeVersion(chartDir, tt.values, "default", kv)
		var bad []string
		for _, m := range linter.Messages {
			if m.Severity > support.InfoSev {
				bad = append(bad, m.Error())
			} else {
				t.Logf("%s: %s", tt.name, m.Error())
			}
		}
		if got := len(bad) > 0; got != tt.bad {
			t.Errorf("helm lint with %s: warnings or errors %q, want some: %v", tt.name, bad, tt.bad)
		}
	}
}

// TestChartFilesAreLinks checks every file the chart's templates read is
// a link to the kustomize base's own file, so there is one copy of each.
func TestChartFilesAreLinks(t *testing.T) {
	root := filepath.Join(chartDir, "files")
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		target, err := os.Readlink(path)
		if err != nil {
			t.Errorf("%s is not a link to deploy/'s file: %v", path, err)
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if want, got := filepath.Clean(rel), filepath.Clean(filepath.Join(filepath.Dir(path), target)); got != want {
			t.Errorf("%s links to %s, want deploy/%s", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("no files under %s", root)
	}
}

// TestChartRendersKustomizeBase renders the chart with its default values
// and checks it holds exactly the objects `kustomize build deploy` does,
// field by field; monitoring on adds exactly deploy/monitoring's (its
// generated dashboard ConfigMap included), drainForce on exactly
// deploy/drain-force's. The chart's templates read the base's files
// (chart/files links to them), so this fails when a link is missing or a
// template changes what no value asks for.
func TestChartRendersKustomizeBase(t *testing.T) {
	base, baseFiles := kustomizeBuild(t, "."), fileObjects(t, ".")
	chart := mustRender(t, nil)
	checkSameObjects(t, "default values, kustomize build deploy", chart, base, blankLinesIgnored)
	checkSameObjects(t, "default values, deploy/'s files", chart, baseFiles)

	monitoring := kustomizeBuild(t, "monitoring")
	chart = mustRender(t, map[string]any{"monitoring": map[string]any{"enabled": true}})
	checkSameObjects(t, "monitoring.enabled, kustomize build", chart, union(base, monitoring), blankLinesIgnored)
	// The dashboard ConfigMap is generated: kustomize's is above.
	checkSameObjects(t, "monitoring.enabled, the files", chart, union(baseFiles, fileObjects(t, "monitoring"), map[string]object{dashboardKey: chart[dashboardKey]}))

	chart = mustRender(t, map[string]any{"drainForce": map[string]any{"enabled": true}})
	checkSameObjects(t, "drainForce.enabled, kustomize build", chart, union(base, kustomizeBuild(t, drainForceDir)), blankLinesIgnored)
	checkSameObjects(t, "drainForce.enabled, the files", chart, union(baseFiles, fileObjects(t, drainForceDir)))

	// Off (the default), none of monitoring's objects: not even the kinds,
	// which need the Prometheus operator's CRDs.
	for k, o := range mustRender(t, map[string]any{"monitoring": map[string]any{"enabled": false}}) {
		if _, ok := monitoring[k]; ok || o["kind"] == "PodMonitor" || o["kind"] == "PrometheusRule" {
			t.Errorf("monitoring off: %s rendered", k)
		}
	}
}

// dashboardKey is deploy/monitoring's generated Grafana dashboard.
const dashboardKey = "ConfigMap selftaint/selftaint-dashboard"

// TestChartPackage packages the chart as helm package does and renders
// the package: it carries the base's files themselves, not the links.
func TestChartPackage(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatalf("packaging the chart: %v", err)
	}
	packaged, err := loader.Load(tgz)
	if err != nil {
		t.Fatalf("loading %s: %v", tgz, err)
	}
	out, err := renderLoaded(t, packaged, nil)
	if err != nil {
		t.Fatalf("helm template %s: %v", tgz, err)
	}
	checkSameObjects(t, "the packaged chart", decodeObjects(t, tgz, []byte(out)), fileObjects(t, "."))
}

// TestChartNamespaceOverride checks the chart with another namespace
// renders what the README's kustomize `namespace:` overlay of deploy/ (with
// the transformer events-in-default, which keeps the Events Roles in
// "default", where client-go files the Events about Nodes) does, which
// TestPolicyNamespaceOverlay and TestCoordinatorPolicyKubeSystemOverlay
// attack on a control plane, but for one thing the overlay gets wrong: it
// sets a namespace on the cluster-scoped admission policies and their
// bindings (which the API server drops).
func TestChartNamespaceOverride(t *testing.T) {
	const ns = "selftaint-system"
	overlay := map[string]object{}
	for _, o := range decodeObjects(t, "kustomize overlay", renderOverlay(t, ".", "namespace: "+ns, []string{eventsInDefaultDir}, nil)) {
		if strings.HasPrefix(o["kind"].(string), "ValidatingAdmissionPolicy") {
			delete(o["metadata"].(map[string]any), "namespace")
		}
		overlay[o.key()] = o
	}
	checkSameObjects(t, "namespace "+ns, mustRender(t, map[string]any{"namespace": ns}), overlay, blankLinesIgnored)
}

// The overrides TestChartOverrides and the control plane test render.
const (
	overrideNamespace = "st-system"
	overrideName      = "st"
)

// chartOverrides sets every value but config and policyParams (see
// TestChartConfig).
func chartOverrides() map[string]any {
	return map[string]any{
		"namespace":        overrideNamespace,
		"fullnameOverride": overrideName,
		"nameOverride":     "ignored-for-fullname",
		"image":            map[string]any{"repository": "registry.example/selftaint", "tag": "v9.9.9", "pullPolicy": "IfNotPresent"},
		"coordinator":      map[string]any{"replicas": 3},
		"drainForce":       map[string]any{"enabled": true},
	}
}

// TestChartOverrides renders the chart with another namespace and name
// and checks everything moved and was renamed together: no object is left
// in selftaint's namespace or under its name, every reference (a binding's
// subjects and role, a policy binding's policy and parameters, a pod's
// service account and ConfigMap, the agent's admission policy) names an
// object of the same rendering, and each admission policy matches a
// rendered service account; the image and replicas are the values'.
func TestChartOverrides(t *testing.T) {
	ms := renderManifests(t, chartOverrides())
	have := map[string]bool{}
	for _, m := range ms {
		have[m.kind()+" "+m.meta().GetNamespace()+"/"+m.meta().GetName()] = true
	}
	ref := func(from manifest, kind, ns, name string) {
		t.Helper()
		if !have[kind+" "+ns+"/"+name] {
			t.Errorf("%s names %s %s/%s, which the chart does not render", from, kind, ns, name)
		}
	}
	for _, m := range ms {
		name, ns := m.meta().GetName(), m.meta().GetNamespace()
		if ns == namespace || (m.kind() != "Namespace" && !strings.HasPrefix(name, overrideName)) || strings.HasPrefix(name, "selftaint") {
			t.Errorf("%s: not moved to %s or not renamed %s*", m, overrideNamespace, overrideName)
		}
		checkChartReferences(t, m, ref)
	}
	// Monitoring (not installable on the test control plane: no Prometheus
	// operator CRDs) scrapes the new namespace.
	withMonitoring := chartOverrides()
	withMonitoring["monitoring"] = map[string]any{"enabled": true}
	objs, podMonitors := mustRender(t, withMonitoring), 0
	for k, o := range objs {
		if o["kind"] != "PodMonitor" {
			continue
		}
		podMonitors++
		spec, _ := o["spec"].(map[string]any)
		if sel, _ := spec["namespaceSelector"].(map[string]any); !reflect.DeepEqual(sel["matchNames"], []any{overrideNamespace}) {
			t.Errorf("%s: namespaceSelector %v, want %s", k, sel, overrideNamespace)
		}
	}
	if podMonitors != 2 {
		t.Errorf("monitoring: %d PodMonitors, want 2 (the agents', the coordinator's)", podMonitors)
	}
	if _, ok := objs["ConfigMap "+overrideNamespace+"/"+overrideName+"-dashboard"]; !ok {
		t.Errorf("monitoring: no dashboard ConfigMap %s/%s-dashboard", overrideNamespace, overrideName)
	}
}

// checkChartReferences checks, with ref, what m (rendered with
// chartOverrides) names is rendered too, and the image and replicas.
func checkChartReferences(t *testing.T, m manifest, ref func(manifest, string, string, string)) {
	t.Helper()
	ns := m.meta().GetNamespace()
	switch o := m.obj.(type) {
	case *rbacv1.ClusterRoleBinding:
		ref(m, o.RoleRef.Kind, "", o.RoleRef.Name)
		checkChartSubjects(t, m, o.Subjects, ref)
	case *rbacv1.RoleBinding:
		ref(m, o.RoleRef.Kind, ns, o.RoleRef.Name)
		checkChartSubjects(t, m, o.Subjects, ref)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		ref(m, "ValidatingAdmissionPolicy", "", o.Spec.PolicyName)
		if o.Spec.ParamRef != nil {
			ref(m, "ValidatingAdmissionPolicy", "", o.Spec.ParamRef.Name)
		}
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		for _, c := range o.Spec.MatchConditions {
			sa := matchedServiceAccount.FindStringSubmatch(c.Expression)
			if sa == nil {
				t.Errorf("%s: match condition %q names no service account", m, c.Expression)
				continue
			}
			ref(m, "ServiceAccount", overrideNamespace, sa[1])
		}
	case *appsv1.DaemonSet:
		checkChartPod(t, m, o.Spec.Template.Spec, ref)
		if want := "--admission-policy=" + overrideName + "-own-node"; !slices.Contains(o.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("%s: args %v, want %s", m, o.Spec.Template.Spec.Containers[0].Args, want)
		}
		ref(m, "ValidatingAdmissionPolicy", "", overrideName+"-own-node")
	case *appsv1.Deployment:
		checkChartPod(t, m, o.Spec.Template.Spec, ref)
		if o.Spec.Replicas == nil || *o.Spec.Replicas != 3 {
			t.Errorf("%s: replicas %v, want 3", m, o.Spec.Replicas)
		}
	case *rbacv1.ClusterRole:
		for _, r := range o.Rules {
			if slices.Contains(r.Resources, "validatingadmissionpolicies") {
				for _, n := range r.ResourceNames {
					ref(m, "ValidatingAdmissionPolicy", "", n)
				}
			}
		}
	}
}

// matchedServiceAccount finds the service account name an admission
// policy's match condition matches (in any namespace).
var matchedServiceAccount = regexp.MustCompile(`endsWith\(':([^']+)'\)`)

// checkChartSubjects checks a binding's subjects are rendered service
// accounts.
func checkChartSubjects(t *testing.T, m manifest, subjects []rbacv1.Subject, ref func(manifest, string, string, string)) {
	t.Helper()
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind {
			t.Errorf("%s: subject %+v, want a ServiceAccount", m, s)
			continue
		}
		ref(m, "ServiceAccount", s.Namespace, s.Name)
	}
}

// checkChartPod checks a pod template's service account and ConfigMaps are
// rendered, and its image is the values'.
func checkChartPod(t *testing.T, m manifest, pod corev1.PodSpec, ref func(manifest, string, string, string)) {
	t.Helper()
	ref(m, "ServiceAccount", overrideNamespace, pod.ServiceAccountName)
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			ref(m, "ConfigMap", overrideNamespace, v.ConfigMap.Name)
		}
	}
	for _, c := range pod.Containers {
		if c.Image != "registry.example/selftaint:v9.9.9" || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %s pull policy %q, want registry.example/selftaint:v9.9.9 IfNotPresent", m, c.Image, c.ImagePullPolicy)
		}
	}
}

// TestChartConfig checks the config value replaces the ConfigMap's
// config.yaml (a string as it is, a map as YAML), its guard name reaches
// the RBAC rules and the coordinator's policy, and policyParams replace the
// agent's policy parameters.
func TestChartConfig(t *testing.T) {
	const cfg = "coordinator:\n  guard:\n    name: my-guard\n"
	params := "agent.selftaint.io/owned-taints: |\n  example.com/t:NoSchedule\nagent.selftaint.io/owned-labels: \"\"\nagent.selftaint.io/owned-conditions: |\n  MyCondition\nagent.selftaint.io/owned-resources: \"\"\n"
	for _, tt := range []struct {
		name    string
		config  any
		want    string
		wantMap map[string]any
	}{
		{"string", cfg, cfg, nil},
		{"map", map[string]any{"coordinator": map[string]any{"guard": map[string]any{"name": "my-guard"}}}, "", map[string]any{"coordinator": map[string]any{"guard": map[string]any{"name": "my-guard"}}}},
	} {
		ms := renderManifests(t, map[string]any{"config": tt.config, "policyParams": params})
		got := find[*corev1.ConfigMap](t, ms, configMapName).Data["config.yaml"]
		if tt.wantMap != nil {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(got), &m); err != nil || !reflect.DeepEqual(m, tt.wantMap) {
				t.Errorf("%s: config.yaml %q (%v), want %v", tt.name, got, err, tt.wantMap)
			}
		} else if got != tt.want {
			t.Errorf("%s: config.yaml %q, want %q", tt.name, got, tt.want)
		}
		// The pods roll when the config changes.
		for _, pod := range []metav1.ObjectMeta{find[*appsv1.DaemonSet](t, ms, "selftaint").Spec.Template.ObjectMeta, find[*appsv1.Deployment](t, ms, coordinatorSA).Spec.Template.ObjectMeta} {
			if sum := pod.Annotations["checksum/config"]; sum != fmt.Sprintf("%x", sha256.Sum256([]byte(got))) {
				t.Errorf("%s: pod annotation checksum/config %q, want config.yaml's SHA-256", tt.name, sum)
			}
		}
		for _, role := range []string{"selftaint-fleet", coordinatorSA} {
			r := find[*rbacv1.Role](t, ms, role)
			for _, rule := range r.Rules {
				if slices.Contains(rule.Resources, "configmaps") && len(rule.ResourceNames) > 0 && !slices.Equal(rule.ResourceNames, []string{"my-guard"}) {
					t.Errorf("%s: Role %s: configmaps %v, want [my-guard]", tt.name, role, rule.ResourceNames)
				}
			}
		}
		if g := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, coordinatorPolicy).Annotations[paramGuard]; g != "my-guard" {
			t.Errorf("%s: the coordinator policy's guard %q, want my-guard", tt.name, g)
		}
		vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, ms, policyName)
		var want map[string]string
		if err := yaml.Unmarshal([]byte(params), &want); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if vap.Annotations[k] != v {
				t.Errorf("%s: policy annotation %s %q, want %q", tt.name, k, vap.Annotations[k], v)
			}
		}
	}
}

// TestChartBadValues checks a bad value is refused with a message naming
// it: by values.schema.json, or by the templates where the schema cannot
// say it.
func TestChartBadValues(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values map[string]any
		want   []string // in the error
	}{
		{"negative replicas", map[string]any{"coordinator": map[string]any{"replicas": -1}}, []string{"/coordinator/replicas", "minimum"}},
		{"fractional replicas", map[string]any{"coordinator": map[string]any{"replicas": 1.5}}, []string{"/coordinator/replicas", "integer"}},
		{"invalid namespace", map[string]any{"namespace": "Selftaint_NS"}, []string{"/namespace", "does not match pattern"}},
		{"empty namespace", map[string]any{"namespace": ""}, []string{"/namespace"}},
		{"invalid name", map[string]any{"fullnameOverride": "Self.Taint"}, []string{"/fullnameOverride", "does not match pattern"}},
		{"name too long", map[string]any{"nameOverride": strings.Repeat("a", 41)}, []string{"/nameOverride", "maxLength"}},
		{"unknown value", map[string]any{"replicas": 3}, []string{"replicas"}},
		{"bad pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, []string{"/image/pullPolicy"}},
		{"monitoring not a bool", map[string]any{"monitoring": map[string]any{"enabled": "yes"}}, []string{"/monitoring/enabled", "boolean"}},
		{"config not YAML", map[string]any{"config": "coordinator: [\n"}, []string{"config: not YAML"}},
		{"coordinator elsewhere", map[string]any{"config": "coordinator:\n  namespace: kube-system\n"}, []string{"config: coordinator.namespace kube-system", "own namespace selftaint"}},
		// The agents may read every Lease of their namespace: never the
		// control plane's.
		{"kube-system", map[string]any{"namespace": "kube-system"}, []string{"namespace kube-system: selftaint needs a namespace of its own", "every agent may read every Lease in it"}},
		{"kube-node-lease", map[string]any{"namespace": "kube-node-lease"}, []string{"namespace kube-node-lease: selftaint needs a namespace of its own"}},
		{"not a policy parameter", map[string]any{"policyParams": "agent.selftaint.io/owned-taint: x\n"}, []string{"policyParams: agent.selftaint.io/owned-taint is not a parameter"}},
	} {
		_, err := renderChart(t, tt.values)
		if err == nil || !containsAll(err.Error(), tt.want) {
			t.Errorf("%s: helm template: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

// TestChartOverridesOnControlPlane installs the chart's rendering with
// another namespace and name (chartOverrides) on a control plane where no
// other install has those names (shared, see kubeSystemOverlays), and
// attacks it with the renamed service accounts' own tokens, as
// TestPolicyNamespaceOverlay and TestCoordinatorPolicyKubeSystemOverlay
// attack kustomize overlays: the agent's policy still confines the agent
// to what it owns on its own Node, the coordinator's to its own Leases and
// guard in its own namespace, its Node and pod policies to drains; what
// they do is allowed.
func TestChartOverridesOnControlPlane(t *testing.T) {
	testcp.SkipIfShort(t, "runs etcd and kube-apiserver")
	t.Parallel()
	const ns, name = overrideNamespace, overrideName
	rendered := renderManifests(t, chartOverrides())
	cp := kubeSystemOverlays.Get(t)
	installRendered(t, cp, ns, rendered)
	admin := cp.Client()

	attackAgentPolicy(t, cp, "chart", ns, name, name+"-own-node")

	coordinator, err := kubernetes.NewForConfig(asServiceAccountIn(cp, ns, name+"-coordinator", ""))
	if err != nil {
		t.Fatal(err)
	}
	waitCoordinatorPolicyNamed(t, coordinator, ns, name+"-coordinator")
	for _, a := range coordinatorPolicyAttacks(t, admin, coordinator, ns) {
		if a.policy == coordinatorPolicy {
			a.policy = name + "-coordinator"
		}
		a.check(t)
	}
	// Each wait ends only once the renamed policy refuses the renamed
	// service account a write RBAC allows it (a label, an eviction with a
	// grace period).
	waitDrainPoliciesNamed(t, coordinator, ns, "chart-a", name+"-coordinator-nodes", name+"-coordinator-pods")
}
