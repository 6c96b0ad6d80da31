package agent

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/selftaint/selftaint/taints"
)

func TestMetadataPatch(t *testing.T) {
	ours := corev1.Taint{Key: "selftaint.io/x", Effect: corev1.TaintEffectNoSchedule}
	foreign := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	node := func(ann map[string]string, ts ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "42", Annotations: ann}, Spec: corev1.NodeSpec{Taints: ts}}
	}
	withRecord := map[string]string{taints.OwnedTaintsAnnotation: "", "other": "x"}
	add := taints.MetadataPlan{Taints: taints.Plan{Taints: []corev1.Taint{foreign, ours}, Owned: []taints.OwnedTaint{taints.OwnedOf(ours)}}}
	tests := []struct {
		name     string
		node     *corev1.Node
		plan     taints.MetadataPlan
		consumed map[string]string
		wantType types.PatchType
		want     []string // substrings of the patch
		not      []string
	}{
		{"taint added: tests the list and the record", node(withRecord, foreign), add, nil, types.JSONPatchType,
			[]string{`{"op":"test","path":"/spec/taints","value":[{"key":"dedicated","value":"ml","effect":"NoSchedule"}]}`,
				`{"op":"test","path":"/metadata/annotations/selftaint.io~1owned-taints","value":""}`,
				`{"op":"add","path":"/spec/taints"`, `{"op":"add","path":"/metadata/annotations/selftaint.io~1owned-taints","value":"selftaint.io/x:NoSchedule"}`},
			[]string{"resourceVersion", `"other"`}},
		{"no taints yet: tests the spec", node(withRecord), taints.MetadataPlan{Taints: taints.Plan{Taints: []corev1.Taint{ours}, Owned: []taints.OwnedTaint{taints.OwnedOf(ours)}}}, nil, types.JSONPatchType,
			[]string{`{"op":"test","path":"/spec","value":{}}`}, nil},
		{"last taint removed", node(map[string]string{taints.OwnedTaintsAnnotation: "selftaint.io/x:NoSchedule"}, ours), taints.MetadataPlan{}, nil, types.JSONPatchType,
			[]string{`{"op":"remove","path":"/spec/taints"}`, `{"op":"add","path":"/metadata/annotations/selftaint.io~1owned-taints","value":""}`}, nil},
		{"no record yet: merge patch with resourceVersion", node(map[string]string{"other": "x"}, foreign), add, nil, types.MergePatchType,
			[]string{`"resourceVersion":"42"`}, nil},
		{"no annotations: merge patch", node(nil, foreign), add, nil, types.MergePatchType, []string{`"resourceVersion":"42"`}, nil},
		{"labels change: merge patch", node(withRecord, foreign), taints.MetadataPlan{Taints: add.Taints, Labels: taints.LabelPlan{Set: map[string]string{"example.com/fpga.present": "true"}}}, nil, types.MergePatchType,
			[]string{`"resourceVersion":"42"`}, nil},
		{"consumed request removed only with its value tested", node(map[string]string{taints.OwnedTaintsAnnotation: "", "selftaint.io/clear-gpu": "v1", "selftaint.io/state-gpu": "s"}),
			taints.MetadataPlan{RemoveAnnotations: []string{"selftaint.io/clear-gpu", "selftaint.io/state-gpu"}}, map[string]string{"selftaint.io/clear-gpu": "v1"}, types.JSONPatchType,
			[]string{`{"op":"test","path":"/metadata/annotations/selftaint.io~1clear-gpu","value":"v1"},{"op":"remove","path":"/metadata/annotations/selftaint.io~1clear-gpu"}`,
				`{"op":"remove","path":"/metadata/annotations/selftaint.io~1state-gpu"}`}, nil},
		{"a newer request is left alone", node(map[string]string{taints.OwnedTaintsAnnotation: "", "selftaint.io/clear-gpu": "v2"}),
			taints.MetadataPlan{RemoveAnnotations: []string{"selftaint.io/clear-gpu"}}, map[string]string{"selftaint.io/clear-gpu": "v1"}, types.JSONPatchType,
			nil, []string{"clear-gpu"}},
		{"annotation already gone: no remove", node(map[string]string{taints.OwnedTaintsAnnotation: ""}), taints.MetadataPlan{RemoveAnnotations: []string{"selftaint.io/noexecute-request"}}, nil, types.JSONPatchType,
			nil, []string{"remove"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, pt, err := metadataPatch(tt.node, tt.plan, tt.consumed)
			if err != nil {
				t.Fatal(err)
			}
			if pt != tt.wantType {
				t.Errorf("got a %s patch, want %s: %s", pt, tt.wantType, b)
			}
			if !json.Valid(b) {
				t.Fatalf("not JSON: %s", b)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("patch %s lacks %s", b, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(string(b), w) {
					t.Errorf("patch %s has %s", b, w)
				}
			}
		})
	}
}
