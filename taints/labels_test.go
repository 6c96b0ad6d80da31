package taints

import (
	"maps"
	"slices"
	"testing"
)

func TestPlanLabels(t *testing.T) {
	const gpu = "nvidia.com/gpu.present"
	const fpga = "example.com/fpga.present"
	tests := []struct {
		name    string
		current map[string]string
		owned   []string
		desired map[string]string
		want    LabelPlan
	}{
		{"nothing", nil, nil, nil, LabelPlan{Set: map[string]string{}}},
		{"add", map[string]string{"team": "a"}, nil, map[string]string{fpga: "true"},
			LabelPlan{Set: map[string]string{fpga: "true"}, Owned: []string{fpga}, Changed: true}},
		{"already right", map[string]string{fpga: "true"}, []string{fpga}, map[string]string{fpga: "true"},
			LabelPlan{Set: map[string]string{}, Owned: []string{fpga}}},
		{"someone else's label is not claimed", map[string]string{gpu: "true"}, nil, map[string]string{gpu: "true"},
			LabelPlan{Set: map[string]string{}, Foreign: []string{gpu}}},
		{"ours, changed by someone: set back", map[string]string{fpga: "false"}, []string{fpga}, map[string]string{fpga: "true"},
			LabelPlan{Set: map[string]string{fpga: "true"}, Owned: []string{fpga}, Changed: true}},
		{"ours, no longer wanted", map[string]string{fpga: "true", "team": "a"}, []string{fpga}, nil,
			LabelPlan{Set: map[string]string{}, Remove: []string{fpga}, Changed: true}},
		{"ours, already gone: record cleaned", map[string]string{"team": "a"}, []string{fpga}, nil,
			LabelPlan{Set: map[string]string{}, Changed: true}},
		{"ours deleted by someone, still wanted: restored", map[string]string{}, []string{fpga}, map[string]string{fpga: "true"},
			LabelPlan{Set: map[string]string{fpga: "true"}, Owned: []string{fpga}, Changed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanLabels(tt.current, tt.owned, tt.desired)
			if !maps.Equal(got.Set, tt.want.Set) || !slices.Equal(got.Remove, tt.want.Remove) || !slices.Equal(got.Owned, tt.want.Owned) ||
				!slices.Equal(got.Foreign, tt.want.Foreign) || got.Changed != tt.want.Changed {
				t.Errorf("PlanLabels() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOwnedLabelsRecord(t *testing.T) {
	got, err := ParseOwnedLabels(" b.io/x.present, a.io/y.present,,b.io/x.present")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.io/y.present", "b.io/x.present"}; !slices.Equal(got, want) {
		t.Errorf("ParseOwnedLabels = %v, want %v", got, want)
	}
	if s := FormatOwnedLabels(got); s != "a.io/y.present,b.io/x.present" {
		t.Errorf("FormatOwnedLabels = %q", s)
	}
	if _, err := ParseOwnedLabels("ok.io/a,not a key!"); err == nil {
		t.Errorf("ParseOwnedLabels accepted a garbled record")
	}
}
