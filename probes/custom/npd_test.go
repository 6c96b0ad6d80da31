package custom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/probestest"
)

func TestLoadNPDConfig(t *testing.T) {
	tests := []struct {
		file string
		want NPDConfig
	}{
		{
			file: "ntp.json",
			want: NPDConfig{
				Source: "ntp-custom-plugin-monitor", InvokeInterval: 30 * time.Second, Timeout: 5 * time.Second,
				MaxOutputLength: 80, Concurrency: 3, MetricsReporting: true,
				Conditions: []Condition{{Type: "NTPProblem", Reason: "NTPIsUp", Message: "ntp service is up", Rules: []Rule{
					{Reason: "NTPIsDown", Path: "./config/plugin/check_ntp.sh", Interval: 30 * time.Second, Timeout: 3 * time.Second},
				}}},
				Warnings: []string{"rules[0] (reason NTPIsDown, path ./config/plugin/check_ntp.sh): temporary rules only make events in NPD; selftaint makes conditions only, so it does not run this rule"},
			},
		},
		{
			file: "network-problems.json",
			want: NPDConfig{
				Source: "network-custom-plugin-monitor", InvokeInterval: time.Minute, Timeout: 10 * time.Second,
				MaxOutputLength: 120, Concurrency: 1, EnableMessageChangeBasedConditionUpdate: true, SkipInitialStatus: true,
				Conditions: []Condition{
					{Type: "ConntrackFull", Reason: "ConntrackOK", Message: "conntrack table has room", Rules: []Rule{
						{Reason: "ConntrackTableFull", Path: "/usr/local/bin/check-conntrack", Args: []string{"--threshold", "90"}, Interval: time.Minute, Timeout: 10 * time.Second},
					}},
					{Type: "DNSProblem", Reason: "DNSIsUp", Message: "DNS resolves", Rules: []Rule{
						{Reason: "ClusterDNSDown", Path: "/usr/local/bin/check-dns", Args: []string{"kubernetes.default.svc"}, Interval: 20 * time.Second, Timeout: 5 * time.Second},
						{Reason: "UpstreamDNSDown", Path: "check-dns", Args: []string{"example.com"}, Interval: time.Minute, Timeout: 10 * time.Second},
					}},
				},
				Warnings: []string{
					"conditions[1] (DNSProblem): NPD's own tainting (taintEnabled) is ignored; selftaint taints nodes through its rules",
					"rules[3] (reason OOMKilling, path /usr/local/bin/check-oom): temporary rules only make events in NPD; selftaint makes conditions only, so it does not run this rule",
					"condition NeverChecked has no permanent rule; selftaint does not report it",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			got, err := LoadNPDConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Path = path
			if g, w := fmt.Sprintf("%+v", *got), fmt.Sprintf("%+v", tt.want); g != w {
				t.Errorf("LoadNPDConfig(%s) =\n%s\nwant\n%s", path, g, w)
			}
			if o := got.Options(); o.Concurrency != tt.want.Concurrency || o.MaxOutputLength != tt.want.MaxOutputLength {
				t.Errorf("Options() = %+v, want concurrency %d, max output length %d", o, tt.want.Concurrency, tt.want.MaxOutputLength)
			}
			g, err := NewGroup(got.Options())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.NewProbes(got.Conditions); err != nil {
				t.Errorf("NewProbes: %v", err)
			}
		})
	}
}

func TestParseNPDConfigErrors(t *testing.T) {
	const perm = `{"type":"permanent","condition":"C","reason":"Down","path":"/x"}`
	conf := func(pluginConfig, rules string) string {
		return `{"plugin":"custom","pluginConfig":{` + pluginConfig + `},"source":"s","conditions":[{"type":"C","reason":"Up","message":"up"}],"rules":[` + rules + `]}`
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"minimal", conf("", perm), ""},
		{"not JSON", `{"plugin":`, "NPD config x.json: unexpected end of JSON input"},
		{"trailing data", conf("", perm) + `{}`, "invalid character '{' after top-level value"},
		{"unknown top-level field", `{"plugin":"custom","sources":"s"}`, `NPD config x.json: unknown field "sources"`},
		{"unknown plugin config field", conf(`"invoke_intervall":"1m"`, perm), `unknown field "pluginConfig.invoke_intervall"`},
		{"unknown rule field", conf("", perm+`,{"type":"permanent","condition":"C","reason":"R","path":"/y","timout":"3s"}`), `unknown field "rules[1].timout"`},
		{"unknown condition field", `{"plugin":"custom","conditions":[{"type":"C","reason":"Up","severity":"warn"}]}`, `unknown field "conditions[0].severity"`},
		{"field names are case-sensitive", `{"Plugin":"custom"}`, `unknown field "Plugin"`},
		{"all unknown fields named", `{"a":1,"rules":[{"b":2}]}`, `unknown field "a", "rules[0].b"`},
		{"wrong type", conf(`"concurrency":"3"`, perm), "cannot unmarshal string"},
		{"plugin", `{"plugin":"other","conditions":[],"rules":[]}`, `plugin: "other" is not supported, only "custom"`},
		{"no plugin", `{"conditions":[],"rules":[]}`, `plugin: "" is not supported`},
		{"bad interval", conf(`"invoke_interval":"30"`, perm), `pluginConfig.invoke_interval: time: missing unit in duration "30"`},
		{"bad timeout", conf(`"timeout":"5 s"`, perm), `pluginConfig.timeout: time: unknown unit`},
		{"zero interval", conf(`"invoke_interval":"0s"`, perm), `pluginConfig.invoke_interval: "0s" must be positive`},
		{"concurrency 0", conf(`"concurrency":0`, perm), "pluginConfig.concurrency: 0 must be positive"},
		{"max output length negative", conf(`"max_output_length":-1`, perm), "pluginConfig.max_output_length: -1 must be positive"},
		{"bad rule timeout", conf("", `{"type":"permanent","condition":"C","reason":"Down","path":"/x","timeout":"fast"}`), `rules[0].timeout: time: invalid duration "fast"`},
		{"rule timeout above global", conf("", `{"type":"permanent","condition":"C","reason":"Down","path":"/x","timeout":"6s"}`), "rules[0].timeout: 6s is above pluginConfig.timeout 5s"},
		{"bad rule interval", conf("", `{"type":"permanent","condition":"C","reason":"Down","path":"/x","invoke_interval":"-1s"}`), `rules[0].invoke_interval: "-1s" must be positive`},
		{"global timeout not below interval", conf(`"invoke_interval":"5s"`, perm), `pluginConfig.timeout: 5s (for rules[0]) must be below 5s, the shortest invoke_interval of the rules of condition "C"`},
		{"rule timeout not below another rule's interval", conf(`"timeout":"10s"`, perm+`,{"type":"permanent","condition":"C","reason":"R","path":"/y","invoke_interval":"8s","timeout":"2s"}`), `pluginConfig.timeout: 10s (for rules[0]) must be below 8s`},
		{"undefined condition", conf("", `{"type":"permanent","condition":"Other","reason":"Down","path":"/x"}`), `rules[0].condition: "Other" is not defined in conditions`},
		{"permanent rule without reason", conf("", `{"type":"permanent","condition":"C","path":"/x"}`), "rules[0].reason: must not be empty"},
		{"rule without path", conf("", `{"type":"permanent","condition":"C","reason":"Down"}`), "rules[0].path: must not be empty"},
		{"rule type", conf("", `{"type":"perm","condition":"C","reason":"Down","path":"/x"}`), `rules[0].type: "perm" is not "temporary" or "permanent"`},
		{"condition without type", `{"plugin":"custom","conditions":[{"reason":"Up"}],"rules":[]}`, "conditions[0].type: must not be empty"},
		{"condition without reason", `{"plugin":"custom","conditions":[{"type":"C"}],"rules":[]}`, "conditions[0].reason: must not be empty"},
		{"duplicate condition", `{"plugin":"custom","conditions":[{"type":"C","reason":"Up"},{"type":"C","reason":"Up"}],"rules":[]}`, `conditions[1].type: "C" is also conditions[0]`},
		{"bad transition", `{"plugin":"custom","conditions":[{"type":"C","reason":"Up","transition":"yesterday"}],"rules":[]}`, `parsing time "yesterday"`},
		{"errors reported together", conf(`"timeout":"x","concurrency":-1`, `{"type":"x","path":""}`), "pluginConfig.timeout: time: invalid duration \"x\"\npluginConfig.concurrency: -1 must be positive\nrules[0].path: must not be empty\nrules[0].type"},
	}
	for _, tt := range tests {
		_, err := ParseNPDConfig([]byte(tt.in), "x.json")
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

func TestLoadNPDConfigMissing(t *testing.T) {
	_, err := LoadNPDConfig(filepath.Join("testdata", "missing.json"))
	probestest.CheckError(t, "missing", err, "reading NPD config: open testdata/missing.json: no such file or directory")
}

// TestNPDConfigEndToEnd loads an NPD config whose plugin path is relative,
// as NPD's own examples are, and runs it: the path is resolved against the
// working directory, as NPD resolves it.
func TestNPDConfigEndToEnd(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config", "plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "ntp-state")
	writeScript(t, filepath.Join(dir, "config", "plugin"), "check_ntp.sh", fmt.Sprintf(`case "$(cat %s)" in
up) echo 'NTP is synchronised'; exit 0 ;;
down) echo 'NTP service is not running'; exit 1 ;;
*) echo 'cannot ask ntpd'; exit 2 ;;
esac
`, state))
	config := filepath.Join(dir, "config", "custom-plugin-monitor.json")
	data, err := os.ReadFile(filepath.Join("testdata", "ntp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	cfg, err := LoadNPDConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "temporary") {
		t.Errorf("got warnings %q, want one about the temporary rule", cfg.Warnings)
	}
	clock := probestest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts := cfg.Options()
	opts.Clock = clock
	g, err := NewGroup(opts)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.NewProbes(cfg.Conditions)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name() != "custom-NTPProblem" || ps[0].Condition() != "NTPProblem" {
		t.Fatalf("got probes %v, want one for NTPProblem", ps)
	}
	if e := ps[0].Entry(); e.Interval != 30*time.Second || e.Timeout != 27*time.Second {
		t.Errorf("Entry() every %v within %v, want every 30s within 27s", e.Interval, e.Timeout)
	}
	for _, step := range []struct {
		state string
		want  probestest.Want
	}{
		// OK reports the condition's own reason and message, as NPD does.
		{"up", probestest.Want{Status: probes.StatusOK, Reason: "NTPIsUp", Message: []string{"ntp service is up"}}},
		{"down", probestest.Want{Status: probes.StatusProblem, Reason: "NTPIsDown", Message: []string{"NTP service is not running"}}},
		{"?", probestest.Want{Status: probes.StatusUnknown, Reason: ReasonPluginUnknown, Message: []string{"./config/plugin/check_ntp.sh could not tell (exit status 2): cannot ask ntpd"}}},
		{"up", probestest.Want{Status: probes.StatusOK, Reason: "NTPIsUp", Message: []string{"ntp service is up"}}},
	} {
		if err := os.WriteFile(state, []byte(step.state), 0o644); err != nil {
			t.Fatal(err)
		}
		got := ps[0].Probe(context.Background())
		probestest.CheckResult(t, got, step.want)
		clock.Step(30 * time.Second)
	}
}

func TestCheckRuleOverlaps(t *testing.T) {
	rule := func(interval, timeout time.Duration) Rule { return Rule{Interval: interval, Timeout: timeout} }
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"no rules", nil, ""},
		{"below own interval", []Rule{rule(10*time.Second, 5*time.Second)}, ""},
		{"equal to own interval", []Rule{rule(5*time.Second, 5*time.Second)}, `rules[7].timeout: 5s (for rules[7]) must be below 5s, the shortest invoke_interval of the rules of condition "C"`},
		{"not below a sibling's interval", []Rule{rule(time.Minute, 5*time.Second), rule(3*time.Second, time.Second)},
			`rules[7].timeout: 5s (for rules[7]) must be below 3s, the shortest invoke_interval of the rules of condition "C"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var at []ruleAt
			for i := range tt.rules {
				at = append(at, ruleAt{i: 7 + i, timeoutField: fmt.Sprintf("rules[%d].timeout", 7+i)})
			}
			var errs problems
			checkRuleOverlaps([]Condition{{Type: "C", Rules: tt.rules}}, [][]ruleAt{at}, &errs)
			got := ""
			if err := errors.Join(errs...); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
