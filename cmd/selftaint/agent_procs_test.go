package main

import "testing"

func TestAgentMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   int
		wantOK bool
	}{
		{name: "unset: one P", env: nil, want: 1, wantOK: true},
		{name: "operator's GOMAXPROCS wins", env: map[string]string{"GOMAXPROCS": "4"}, want: 0, wantOK: false},
		{name: "operator's GOMAXPROCS=1 is theirs too", env: map[string]string{"GOMAXPROCS": "1"}, want: 0, wantOK: false},
		{name: "GOGC is not GOMAXPROCS", env: map[string]string{"GOGC": "100"}, want: 1, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := agentMaxProcs(func(k string) string { return tc.env[k] })
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("agentMaxProcs() = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
