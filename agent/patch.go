package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/taints"
)

// The metadata write (taints, ownership records, our annotations) is
// preconditioned on what the plan depends on, not on the whole object.
// spec.taints is an atomic list, so the write must fail if the list
// changed since it was read; a label, an annotation or a status change by
// someone else changes nothing the plan read, and must cost no retry: on a
// busy Node (the kubelet's status, controllers' annotations, an operator's
// labels) a resourceVersion precondition loses the race again and again.
//
// A JSON patch (RFC 6902) does that: it tests the taint list (or, when
// there is none, the spec it would be added to) and the ownership record,
// then replaces them, and sets or removes only our annotations; a
// consumed request is tested for the value handled before it is removed.
// What a JSON patch cannot test — the absence of a key — falls back to the
// merge patch carrying resourceVersion: the first write of the ownership
// record, label changes (a label we add must not overwrite one someone
// else set meanwhile), a Node without annotations. The ownership record is
// kept even when it owns nothing (""), so that fallback is rare.

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// pointer escapes a map key for a JSON pointer (RFC 6901).
func pointer(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// metadataPatch builds the patch that writes plan p onto node: a JSON patch
// with the narrow preconditions above where they can be expressed, else a
// merge patch carrying node's resourceVersion. consumed are the request
// annotations handled (key -> value), removed only while they still hold
// that value.
func metadataPatch(node *corev1.Node, p taints.MetadataPlan, consumed map[string]string) ([]byte, types.PatchType, error) {
	if ops, ok := jsonMetadataOps(node, p, consumed); ok {
		b, err := json.Marshal(ops)
		return b, types.JSONPatchType, err
	}
	b, err := mergeMetadataPatch(node.ResourceVersion, p.Taints, p.Labels, p.Annotations, p.RemoveAnnotations)
	return b, types.MergePatchType, err
}

// jsonMetadataOps returns the JSON patch for p, or false where a
// precondition cannot be expressed in one.
func jsonMetadataOps(node *corev1.Node, p taints.MetadataPlan, consumed map[string]string) ([]patchOp, bool) {
	record, hasRecord := node.Annotations[taints.OwnedTaintsAnnotation]
	if node.Annotations == nil || !hasRecord || labelsChange(node, p.Labels) {
		return nil, false
	}
	ann := "/metadata/annotations/"
	var ops []patchOp
	if len(node.Spec.Taints) > 0 {
		ops = append(ops, patchOp{Op: "test", Path: "/spec/taints", Value: node.Spec.Taints})
	} else {
		ops = append(ops, patchOp{Op: "test", Path: "/spec", Value: node.Spec})
	}
	ops = append(ops, patchOp{Op: "test", Path: ann + pointer(taints.OwnedTaintsAnnotation), Value: record})
	if !reflect.DeepEqual(p.Taints.Taints, node.Spec.Taints) && (len(p.Taints.Taints) > 0 || len(node.Spec.Taints) > 0) {
		if len(p.Taints.Taints) > 0 {
			ops = append(ops, patchOp{Op: "add", Path: "/spec/taints", Value: p.Taints.Taints})
		} else {
			ops = append(ops, patchOp{Op: "remove", Path: "/spec/taints"})
		}
	}
	if owned := taints.FormatOwned(p.Taints.Owned); owned != record {
		ops = append(ops, patchOp{Op: "add", Path: ann + pointer(taints.OwnedTaintsAnnotation), Value: owned})
	}
	for _, k := range slices.Sorted(maps.Keys(p.Annotations)) {
		ops = append(ops, patchOp{Op: "add", Path: ann + pointer(k), Value: p.Annotations[k]})
	}
	for _, k := range p.RemoveAnnotations {
		cur, ok := node.Annotations[k]
		if !ok {
			continue
		}
		if v, handled := consumed[k]; handled {
			if cur != v {
				continue // a newer request: it stays for the next sync
			}
			ops = append(ops, patchOp{Op: "test", Path: ann + pointer(k), Value: v})
		}
		ops = append(ops, patchOp{Op: "remove", Path: ann + pointer(k)})
	}
	return ops, true
}

// labelsChange reports whether the label plan changes anything: labels or
// their ownership record.
func labelsChange(node *corev1.Node, l taints.LabelPlan) bool {
	if len(l.Set) > 0 || len(l.Remove) > 0 {
		return true
	}
	want := ""
	if len(l.Owned) > 0 {
		want = taints.FormatOwnedLabels(l.Owned)
	}
	return want != node.Annotations[taints.OwnedLabelsAnnotation]
}

// mergeMetadataPatch is the fallback: a JSON merge patch of the taint list,
// the ownership records, labels and annotations, preconditioned on
// resourceVersion. The taint record is written as "" when it owns
// nothing, so later writes can test it.
func mergeMetadataPatch(resourceVersion string, plan taints.Plan, labels taints.LabelPlan, annotations map[string]string, remove []string) ([]byte, error) {
	var ownedLabels any // null removes the annotation
	if len(labels.Owned) > 0 {
		ownedLabels = taints.FormatOwnedLabels(labels.Owned)
	}
	var list any // null removes spec.taints
	if len(plan.Taints) > 0 {
		list = plan.Taints
	}
	ann := map[string]any{
		taints.OwnedTaintsAnnotation: taints.FormatOwned(plan.Owned),
		taints.OwnedLabelsAnnotation: ownedLabels,
	}
	for k, v := range annotations {
		ann[k] = v
	}
	for _, k := range remove {
		ann[k] = nil
	}
	meta := map[string]any{"resourceVersion": resourceVersion, "annotations": ann}
	if len(labels.Set) > 0 || len(labels.Remove) > 0 {
		l := map[string]any{}
		for k, v := range labels.Set {
			l[k] = v
		}
		for _, k := range labels.Remove {
			l[k] = nil
		}
		meta["labels"] = l
	}
	b, err := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"taints": list}})
	if err != nil {
		return nil, fmt.Errorf("encoding the merge patch: %w", err)
	}
	return b, nil
}

// sameTested reports whether what a JSON metadata patch tests is the same
// on a and b: the taints (or spec) and the ownership record.
func sameTested(a, b *corev1.Node) bool {
	return reflect.DeepEqual(a.Spec, b.Spec) &&
		a.Annotations[taints.OwnedTaintsAnnotation] == b.Annotations[taints.OwnedTaintsAnnotation]
}
