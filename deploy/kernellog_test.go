package deploy_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// kernelLogDir is the opt-in kustomize component that turns the kernel log
// monitor on, relative to deploy/.
const kernelLogDir = "kernel-log"

// kernelLogConfigLines are what the component's config.yaml adds to
// deploy/configmap.yaml's, after its npdConfigs example.
const kernelLogConfigLines = `  # The kernel log monitor: node-problem-detector's system-log-monitor files,
  # unchanged (deploy/kernel-log/npd/, mounted here from this ConfigMap).
  npdLogConfigs:
  - /etc/selftaint/kernel-monitor.json
  - /etc/selftaint/readonly-monitor.json
  kmsgPath: /dev/kmsg      # the pod's own mount of the host's /dev/kmsg (daemonset-patch.yaml)
`

// kernelLogAnchor is the line of deploy/configmap.yaml's config.yaml that
// kernelLogConfigLines follow.
const kernelLogAnchor = "  # - /etc/node-problem-detector/config/custom-plugin-monitor.json\n"

// TestKernelLogComponent renders deploy/ with deploy/kernel-log/ (as a
// kustomization naming both would) and checks what it changes: the agent
// container is privileged and root with /dev/kmsg mounted read-only from
// a hostPath CharDevice, keeping its read-only root and seccomp profile;
// nothing else in the DaemonSet, and no object but the DaemonSet, the
// config and the admission policy's owned-conditions, differs from
// deploy/'s; deploy/ itself stays unprivileged. The config loads with
// the agent's loader (the selftaint binary), its NPD files where the ConfigMap mount puts them
// (copies of probes/logmon/testdata/npd), and the policy's parameters are
// exactly what it lets the agent own.
func TestKernelLogComponent(t *testing.T) {
	base := kustomizeOverlay(t, ".", "")
	withLog := kustomizeOverlay(t, ".", "", kernelLogDir)
	if len(withLog) != len(base) {
		t.Fatalf("%d objects with the component, %d without: it must add none", len(withLog), len(base))
	}
	baseDS, ds := find[*appsv1.DaemonSet](t, base, "selftaint"), find[*appsv1.DaemonSet](t, withLog, "selftaint")
	pod, c := ds.Spec.Template.Spec, ds.Spec.Template.Spec.Containers[0]
	psc, sc := pod.SecurityContext, c.SecurityContext
	for _, tt := range []struct {
		what string
		ok   bool
	}{
		{"deploy/'s agent container is not privileged", baseDS.Spec.Template.Spec.Containers[0].SecurityContext.Privileged == nil},
		{"privileged", sc.Privileged != nil && *sc.Privileged},
		{"allowPrivilegeEscalation true (the API server refuses false with privileged)", sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation},
		{"no capabilities list (privileged holds them all)", sc.Capabilities == nil},
		{"readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem},
		{"runAsUser 0", psc.RunAsUser != nil && *psc.RunAsUser == 0},
		{"runAsGroup 0", psc.RunAsGroup != nil && *psc.RunAsGroup == 0},
		{"runAsNonRoot false", psc.RunAsNonRoot != nil && !*psc.RunAsNonRoot},
		{"seccompProfile RuntimeDefault", psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
	} {
		if !tt.ok {
			t.Errorf("the agent with the kernel log: want %s; pod %+v, container %+v", tt.what, psc, sc)
		}
	}
	kmsg := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/dev/kmsg" })
	vol := -1
	if kmsg >= 0 {
		vol = slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[kmsg].Name })
	}
	if kmsg < 0 || !c.VolumeMounts[kmsg].ReadOnly || vol < 0 || pod.Volumes[vol].HostPath == nil ||
		pod.Volumes[vol].HostPath.Path != "/dev/kmsg" || pod.Volumes[vol].HostPath.Type == nil || *pod.Volumes[vol].HostPath.Type != corev1.HostPathCharDev {
		t.Fatalf("mounts %+v, volumes %+v: want /dev/kmsg read-only from the host's /dev/kmsg, a CharDevice", c.VolumeMounts, pod.Volumes)
	}
	// Undo exactly those changes: what is left must be deploy/'s DaemonSet.
	undone := ds.DeepCopy()
	upod := &undone.Spec.Template.Spec
	upod.SecurityContext = baseDS.Spec.Template.Spec.SecurityContext
	upod.Containers[0].SecurityContext = baseDS.Spec.Template.Spec.Containers[0].SecurityContext
	upod.Containers[0].VolumeMounts = slices.Delete(upod.Containers[0].VolumeMounts, kmsg, kmsg+1)
	upod.Volumes = slices.Delete(upod.Volumes, vol, vol+1)
	if !equality.Semantic.DeepEqual(undone, baseDS) {
		t.Errorf("the component changes the DaemonSet beyond the security context and the /dev/kmsg mount:\n%+v\nwant\n%+v", undone.Spec, baseDS.Spec)
	}

	cm := find[*corev1.ConfigMap](t, withLog, configMapName)
	checkKernelLogConfig(t, cm, pod, c)
	vap := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, withLog, policyName)
	baseVAP := find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, base, policyName)
	undoneVAP := vap.DeepCopy()
	undoneVAP.Annotations[paramConditions] = baseVAP.Annotations[paramConditions]
	if !equality.Semantic.DeepEqual(undoneVAP, baseVAP) {
		t.Errorf("the component changes the admission policy beyond its owned-conditions")
	}
	// The config and its NPD files, loaded by the agent's own loader (the
	// selftaint binary: agent/config links go-nvml, which a test binary
	// with kustomize's plugin support cannot load), give exactly the
	// policy's parameters.
	params := policyParamsOf(t, cm)
	for _, k := range paramKeys {
		if !strings.Contains(params, k+":") {
			t.Fatalf("selftaint policy-params printed no %s:\n%s", k, params)
		}
	}
	var got strings.Builder
	for _, k := range paramKeys {
		if v := vap.Annotations[k]; v == "" {
			got.WriteString(k + ": \"\"\n")
		} else {
			got.WriteString(k + ": |\n")
			for _, l := range strings.Split(strings.TrimSuffix(v, "\n"), "\n") {
				got.WriteString("  " + l + "\n")
			}
		}
	}
	if got.String() != params {
		t.Errorf("the policy's parameters with the component:\n%s\nwant what selftaint policy-params prints for its config:\n%s", got.String(), params)
	}
	for _, c := range []string{"KernelDeadlock", "XfsShutdown", "CperHardwareErrorFatal", "ReadonlyFilesystem"} {
		if !strings.Contains(params, "  "+c+"\n") {
			t.Errorf("selftaint policy-params with the component's config does not name %s (its NPD files' condition):\n%s", c, params)
		}
	}
	for i, m := range withLog {
		switch m.obj.(type) {
		case *appsv1.DaemonSet, *admissionregistrationv1.ValidatingAdmissionPolicy:
			continue
		case *corev1.ConfigMap:
			if m.meta().GetName() == configMapName {
				continue
			}
		}
		if !equality.Semantic.DeepEqual(m.obj, base[i].obj) {
			t.Errorf("the component changes %s", m)
		}
	}
}

// checkKernelLogConfig checks the component's ConfigMap: config.yaml is
// deploy/configmap.yaml's plus kernelLogConfigLines (and a comment on
// top), it names its NPD files where the agent container's mount of the
// ConfigMap puts them and the kernel log where its /dev/kmsg mount is, and
// the NPD files are byte-for-byte probes/logmon/testdata/npd's.
func checkKernelLogConfig(t *testing.T, cm *corev1.ConfigMap, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	baseCM, err := decodeFile("configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	baseConfig := baseCM[0].obj.(*corev1.ConfigMap).Data["config.yaml"]
	if !strings.Contains(baseConfig, kernelLogAnchor) {
		t.Fatalf("deploy/configmap.yaml's config.yaml has no line %q for the component's lines to follow", kernelLogAnchor)
	}
	want := strings.Replace(baseConfig, kernelLogAnchor, kernelLogAnchor+kernelLogConfigLines, 1)
	got := cm.Data["config.yaml"]
	head, ok := strings.CutSuffix(got, want)
	if !ok {
		t.Errorf("deploy/kernel-log/config.yaml is not deploy/configmap.yaml's config.yaml with the kernel log lines after %q; want it to end with:\n%s", kernelLogAnchor, want)
	}
	for _, l := range strings.Split(strings.TrimSuffix(head, "\n"), "\n") {
		if ok && l != "" && !strings.HasPrefix(l, "#") {
			t.Errorf("deploy/kernel-log/config.yaml: line %q before deploy/'s config is not a comment", l)
		}
	}
	var mountDir string
	for _, v := range pod.Volumes {
		for _, m := range c.VolumeMounts {
			if v.ConfigMap != nil && v.ConfigMap.Name == configMapName && m.Name == v.Name {
				mountDir = m.MountPath
			}
		}
	}
	var cfg struct {
		Checks struct {
			NPDLogConfigs []string `json:"npdLogConfigs"`
			KmsgPath      string   `json:"kmsgPath"`
		} `json:"checks"`
	}
	if err := yaml.Unmarshal([]byte(got), &cfg); err != nil {
		t.Fatalf("the component's config.yaml: %v", err)
	}
	if len(cfg.Checks.NPDLogConfigs) != 2 {
		t.Errorf("npdLogConfigs %v, want NPD's two kmsg files", cfg.Checks.NPDLogConfigs)
	}
	for _, p := range cfg.Checks.NPDLogConfigs {
		if path.Dir(p) != mountDir || cm.Data[path.Base(p)] == "" {
			t.Errorf("npdLogConfigs names %s: not a file of the ConfigMap (keys %v) under its mount %s", p, slices.Sorted(maps.Keys(cm.Data)), mountDir)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == cfg.Checks.KmsgPath }) {
		t.Errorf("kmsgPath %q is not a mount of the agent container", cfg.Checks.KmsgPath)
	}
	for _, f := range []string{"kernel-monitor.json", "readonly-monitor.json"} {
		orig, err := os.ReadFile(filepath.Join("../probes/logmon/testdata/npd", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(cm.Data[f]), orig) {
			t.Errorf("deploy/kernel-log/npd/%s differs from probes/logmon/testdata/npd/%s (NPD's, unchanged): copy it again", f, f)
		}
	}
}

// paramKeys are the admission policy's parameters, in the order selftaint
// policy-params prints them.
var paramKeys = []string{paramTaints, paramLabels, paramConditions, paramResources}

// policyParamsOf writes the component's ConfigMap into a directory standing
// in for its mount and returns what `selftaint policy-params` prints for
// its config.yaml there (its NPD files' paths moved to that directory):
// the config and the NPD files load with the agent's loader.
func policyParamsOf(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	bin := buildSelftaint(t)
	dir := t.TempDir()
	for k, v := range cm.Data {
		data := v
		if k == "config.yaml" {
			data = strings.ReplaceAll(v, "/etc/selftaint/", dir+"/")
		}
		if err := os.WriteFile(filepath.Join(dir, k), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin(t), "policy-params", "--config="+filepath.Join(dir, "config.yaml")).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("selftaint policy-params with the component's config: %v\n%s", err, stderr)
	}
	return string(out)
}

// updateManifests replaces the objects ms names, which exist, with ms's
// versions (as kubectl apply would), with strict field validation.
func updateManifests(t *testing.T, c kubernetes.Interface, ms []manifest) {
	t.Helper()
	ctx := t.Context()
	opts := metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict}
	for _, m := range ms {
		var err error
		switch o := m.obj.(type) {
		case *appsv1.DaemonSet:
			err = updateObject(ctx, o, c.AppsV1().DaemonSets(o.Namespace).Get, c.AppsV1().DaemonSets(o.Namespace).Update, opts)
		case *corev1.ConfigMap:
			err = updateObject(ctx, o, c.CoreV1().ConfigMaps(o.Namespace).Get, c.CoreV1().ConfigMaps(o.Namespace).Update, opts)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			p := c.AdmissionregistrationV1().ValidatingAdmissionPolicies()
			err = updateObject(ctx, o, p.Get, p.Update, opts)
		default:
			t.Fatalf("the test does not update a %T", m.obj)
		}
		if err != nil {
			t.Fatalf("updating %s: %v", m, err)
		}
	}
}

// updateObject updates the object named as want to want, at the
// resourceVersion it has.
func updateObject[T interface {
	metav1.Object
	comparable
}](ctx context.Context, want T, get func(context.Context, string, metav1.GetOptions) (T, error), update func(context.Context, T, metav1.UpdateOptions) (T, error), opts metav1.UpdateOptions) error {
	have, err := get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	want.SetResourceVersion(have.GetResourceVersion())
	_, err = update(ctx, want, opts)
	return err
}

// kernelLogChanges is the objects deploy/kernel-log/ changes, as rendered
// with deploy/.
func kernelLogChanges(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	for _, m := range kustomizeOverlay(t, ".", "", kernelLogDir) {
		switch m.obj.(type) {
		case *appsv1.DaemonSet, *admissionregistrationv1.ValidatingAdmissionPolicy:
		case *corev1.ConfigMap:
			if m.meta().GetName() != configMapName {
				continue
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}
