package taints

import (
	"fmt"
	"testing"
)

func TestTrustOwned(t *testing.T) {
	mem := TaintID{Key: "selftaint.io/memory-pressure", Effect: "NoSchedule"}
	memExec := TaintID{Key: "selftaint.io/memory-pressure", Effect: "NoExecute"}
	fpga := TaintID{Key: "example.com/fpga", Effect: "NoSchedule"}
	gpuExec := TaintID{Key: "nvidia.com/gpu", Effect: "NoExecute"}
	o := Ownable{
		Taints: map[TaintID]bool{mem: true, fpga: true, {Key: "nvidia.com/gpu", Effect: "NoSchedule"}: true},
		Labels: map[string]bool{"example.com/fpga.present": true},
	}
	dedicated := TaintID{Key: "dedicated", Effect: "NoSchedule"}
	cp := TaintID{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}
	tests := []struct {
		name                 string
		ids                  []TaintID
		wantTrust, wantIgnor []TaintID
	}{
		{"empty record", nil, nil, nil},
		{"all ours", []TaintID{mem, fpga}, []TaintID{mem, fpga}, nil},
		{"another effect under an ownable key", []TaintID{memExec, gpuExec}, nil, []TaintID{memExec, gpuExec}},
		{"a foreign key claimed", []TaintID{dedicated}, nil, []TaintID{dedicated}},
		{"mixed, order kept", []TaintID{cp, mem, dedicated, fpga}, []TaintID{mem, fpga}, []TaintID{cp, dedicated}},
	}
	for _, tt := range tests {
		trusted, ignored := o.TrustOwned(tt.ids)
		if fmt.Sprint(trusted) != fmt.Sprint(tt.wantTrust) || fmt.Sprint(ignored) != fmt.Sprint(tt.wantIgnor) {
			t.Errorf("%s: TrustOwned = %v, %v; want %v, %v", tt.name, trusted, ignored, tt.wantTrust, tt.wantIgnor)
		}
	}

	labelTests := []struct {
		name                 string
		keys                 []string
		wantTrust, wantIgnor []string
	}{
		{"empty record", nil, nil, nil},
		{"ours", []string{"example.com/fpga.present"}, []string{"example.com/fpga.present"}, nil},
		{"a foreign label claimed", []string{"node-role.kubernetes.io/control-plane"}, nil, []string{"node-role.kubernetes.io/control-plane"}},
		{"a lookalike .present label", []string{"node-role.kubernetes.io/control-plane.present", "example.com/fpga.present"},
			[]string{"example.com/fpga.present"}, []string{"node-role.kubernetes.io/control-plane.present"}},
	}
	for _, tt := range labelTests {
		trusted, ignored := o.TrustOwnedLabels(tt.keys)
		if fmt.Sprint(trusted) != fmt.Sprint(tt.wantTrust) || fmt.Sprint(ignored) != fmt.Sprint(tt.wantIgnor) {
			t.Errorf("%s: TrustOwnedLabels = %v, %v; want %v, %v", tt.name, trusted, ignored, tt.wantTrust, tt.wantIgnor)
		}
	}
}
