package main

import "testing"

// TestAgentGCPercent: the agent sets its own GC target only where the
// operator set neither GOGC nor GOMEMLIMIT.
func TestAgentGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int
		wantSet bool
	}{
		{name: "neither set", env: map[string]string{}, want: defaultAgentGCPercent, wantSet: true},
		{name: "GOGC set", env: map[string]string{"GOGC": "100"}, wantSet: false},
		{name: "GOGC off", env: map[string]string{"GOGC": "off"}, wantSet: false},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "40MiB"}, wantSet: false},
		{name: "both set", env: map[string]string{"GOGC": "200", "GOMEMLIMIT": "1GiB"}, wantSet: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set := agentGCPercent(func(k string) string { return tc.env[k] })
			if got != tc.want || set != tc.wantSet {
				t.Errorf("agentGCPercent = %d, %v; want %d, %v", got, set, tc.want, tc.wantSet)
			}
		})
	}
	if defaultAgentGCPercent >= 100 || defaultAgentGCPercent <= 0 {
		t.Errorf("defaultAgentGCPercent = %d: want below the runtime's 100 (a smaller heap) and above 0", defaultAgentGCPercent)
	}
}
