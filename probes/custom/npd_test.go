package custom

import (
	"encoding/json"
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

// npdValidate is NPD's own verdict on a custom plugin monitor config:
// json.Unmarshal into its types, then CustomPluginConfig's
// ApplyConfiguration and Validate, transcribed from
// pkg/custompluginmonitor/types/config.go at the commit in
// testdata/npd/README.md. Validate's check that every rule's path exists
// is left out: it depends on the machine, not the file (see
// TestLoadNPDConfigMissingPlugins). Errors are NPD's words.
func npdValidate(data []byte) error {
	var c npdConfigOfNPD
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("Failed to unmarshal configuration file: %v", err)
	}
	d, err := c.applyConfiguration()
	if err != nil {
		return err
	}
	return c.validate(d)
}

// npdConfigOfNPD is NPD's CustomPluginConfig, as encoding/json reads it.
type npdConfigOfNPD struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval    *string `json:"invoke_interval"`
		Timeout           *string `json:"timeout"`
		MaxOutputLength   *int    `json:"max_output_length"`
		Concurrency       *int    `json:"concurrency"`
		MessageUpdates    *bool   `json:"enable_message_change_based_condition_update"`
		SkipInitialStatus *bool   `json:"skip_initial_status"`
	} `json:"pluginConfig"`
	Source     string `json:"source"`
	Conditions []struct {
		Type       string    `json:"type"`
		Status     string    `json:"status"`
		Transition time.Time `json:"transition"`
		Reason     string    `json:"reason"`
		Message    string    `json:"message"`
	} `json:"conditions"`
	Rules []struct {
		Type           string   `json:"type"`
		Condition      string   `json:"condition"`
		Reason         string   `json:"reason"`
		Path           string   `json:"path"`
		Args           []string `json:"args"`
		Timeout        *string  `json:"timeout"`
		InvokeInterval *string  `json:"invoke_interval"`
	} `json:"rules"`
	MetricsReporting *bool `json:"metricsReporting"`
}

// npdDurations are the durations ApplyConfiguration parses; a rule's are
// nil when not given.
type npdDurations struct {
	timeout, interval           time.Duration
	ruleTimeouts, ruleIntervals []*time.Duration
}

// applyConfiguration is ApplyConfiguration: defaults and durations.
func (c *npdConfigOfNPD) applyConfiguration() (npdDurations, error) {
	parse := func(s *string, def time.Duration, what string) (*time.Duration, error) {
		if s == nil {
			return &def, nil
		}
		d, err := time.ParseDuration(*s)
		if err != nil {
			return nil, fmt.Errorf("error in parsing %s %q: %v", what, *s, err)
		}
		return &d, nil
	}
	var d npdDurations
	timeout, err := parse(c.PluginConfig.Timeout, 5*time.Second, "global timeout")
	if err != nil {
		return d, err
	}
	interval, err := parse(c.PluginConfig.InvokeInterval, 30*time.Second, "invoke interval")
	if err != nil {
		return d, err
	}
	d.timeout, d.interval = *timeout, *interval
	for _, r := range c.Rules {
		var rt, ri *time.Duration
		if r.Timeout != nil {
			if rt, err = parse(r.Timeout, 0, "rule timeout"); err != nil {
				return d, err
			}
		}
		if r.InvokeInterval != nil {
			if ri, err = parse(r.InvokeInterval, 0, "rule invoke interval"); err != nil {
				return d, err
			}
		}
		d.ruleTimeouts, d.ruleIntervals = append(d.ruleTimeouts, rt), append(d.ruleIntervals, ri)
	}
	return d, nil
}

// validate is Validate, but for its check that rule paths exist.
func (c *npdConfigOfNPD) validate(d npdDurations) error {
	if c.Plugin != "custom" {
		return fmt.Errorf("NPD does not support %q plugin for now. Only support \"custom\"", c.Plugin)
	}
	if d.interval <= 0 {
		return fmt.Errorf("global invoke interval must be greater than zero: %v", d.interval)
	}
	for i := range c.Rules {
		if d.ruleIntervals[i] != nil && *d.ruleIntervals[i] <= 0 {
			return fmt.Errorf("rule invoke interval must be greater than zero")
		}
		if d.ruleTimeouts[i] != nil && *d.ruleTimeouts[i] > d.timeout {
			return fmt.Errorf("plugin timeout is greater than global timeout")
		}
	}
	for _, r := range c.Rules {
		if r.Path == "" { // os.Stat("") is always IsNotExist
			return fmt.Errorf("rule path %q does not exist", r.Path)
		}
	}
	for _, r := range c.Rules {
		if r.Type != "permanent" {
			continue
		}
		found := false
		for _, cond := range c.Conditions {
			found = found || cond.Type == r.Condition
		}
		if !found {
			return fmt.Errorf("permanent problem %s does not have preset default condition", r.Condition)
		}
	}
	return nil
}

// readNPD reads a file of testdata/npd.
func readNPD(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "npd", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestNPDShippedConfigs loads every custom plugin monitor config NPD
// ships, unchanged: NPD accepts each, and so must selftaint, with every
// rule a probe can run (the runner taking the probe's Entry), including
// the health checkers whose 3m timeout is far above their 10s interval,
// and the files of temporary rules only, whose events-only probe is named
// after the file and feeds no condition.
func TestNPDShippedConfigs(t *testing.T) {
	type probe struct {
		name, cond     string // the probe's name and condition ("": events only)
		rules, events  int
		every, timeout time.Duration // of the probe's Entry
	}
	health := func(cond string) []probe {
		return []probe{{"custom-" + cond, cond, 1, 0, 10 * time.Second, 9 * time.Second}}
	}
	counter := func(cond string) probe {
		return probe{"custom-" + cond, cond, 1, 0, 5 * time.Minute, 270 * time.Second}
	}
	tests := []struct {
		file   string
		probes []probe
	}{
		{"custom-plugin-monitor.json", []probe{{"custom-NTPProblem", "NTPProblem", 1, 1, 30 * time.Second, 27 * time.Second}}},
		{"docker-monitor-counter.json", []probe{counter("CorruptDockerOverlay2")}},
		{"health-checker-containerd.json", health("ContainerRuntimeUnhealthy")},
		{"health-checker-docker.json", health("ContainerRuntimeUnhealthy")},
		{"health-checker-kubelet.json", health("KubeletUnhealthy")},
		{"iptables-mode-monitor.json", []probe{{"custom-npd:iptables-mode-monitor", "", 0, 1, 86400 * time.Second, 77760 * time.Second}}},
		{"kernel-monitor-counter.json", []probe{counter("FrequentUnregisterNetDevice")}},
		{"network-problem-monitor.json", []probe{{"custom-npd:network-problem-monitor", "", 0, 2, 30 * time.Second, 27 * time.Second}}},
		{"systemd-monitor-counter.json", []probe{counter("FrequentKubeletRestart"), counter("FrequentDockerRestart"), counter("FrequentContainerdRestart")}},
		{"windows-defender-monitor.json", []probe{{"custom-npd:windows-defender-monitor", "", 0, 1, 10 * time.Minute, 9 * time.Minute}}},
		{"windows-health-checker-containerd.json", health("ContainerRuntimeUnhealthy")},
		{"windows-health-checker-docker.json", health("ContainerRuntimeUnhealthy")},
		{"windows-health-checker-kubelet.json", health("KubeletUnhealthy")},
		{"windows-health-checker-kubeproxy.json", health("KubeProxyUnhealthy")},
	}
	files, err := filepath.Glob(filepath.Join("testdata", "npd", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(files), len(tests); got != want {
		t.Errorf("testdata/npd holds %d configs, the table %d: keep them in step", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data := readNPD(t, tt.file)
			if err := npdValidate(data); err != nil {
				t.Fatalf("NPD refuses its own config: %v", err)
			}
			c, err := ParseNPDConfig(data, filepath.Join("/etc/node-problem-detector/config", tt.file), NPDOptions{})
			if err != nil {
				t.Fatalf("NPD accepts it, selftaint refuses it: %v", err)
			}
			var got []probe
			for _, e := range probeEntries(t, c) {
				p := e.Probe.(*Probe)
				got = append(got, probe{p.Name(), p.Condition(), len(p.cond.Rules), len(p.cond.Events), e.Interval, e.Timeout})
				if !p.cond.NPD {
					t.Errorf("%s: not marked NPD", p.Name())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.probes) {
				t.Errorf("got probes %v, want %v", got, tt.probes)
			}
			for _, w := range c.Warnings {
				if strings.Contains(w, "not run") {
					t.Errorf("got warning %q: every rule runs", w)
				}
			}
		})
	}
}

// probeEntries builds c's probes and returns their Entries, which the
// runner must take.
func probeEntries(t *testing.T, c *NPDConfig) []probes.Entry {
	t.Helper()
	g, err := NewGroup(c.Options())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.NewProbes(c.ProbeConditions())
	if err != nil {
		t.Fatalf("NewProbes: %v", err)
	}
	var entries []probes.Entry
	for _, p := range ps {
		entries = append(entries, p.Entry())
	}
	if _, err := probes.NewRunner(entries, probes.RunnerOptions{}); err != nil {
		t.Errorf("the runner refuses the probes: %v", err)
	}
	return entries
}

// edit returns the shipped config name with old replaced by new, once.
func edit(t *testing.T, name, old, new string) []byte {
	t.Helper()
	data := string(readNPD(t, name))
	if strings.Count(data, old) != 1 {
		t.Fatalf("%s holds %q %d times, want once", name, old, strings.Count(data, old))
	}
	return []byte(strings.Replace(data, old, new, 1))
}

// TestNPDConfigVerdicts runs configs through NPD's rules (npdValidate) and
// selftaint's loader: each is a shipped config with one edit. Where NPD
// refuses a file, selftaint must too, naming the field; where NPD loads
// it, selftaint must too, except the differences listed, each with why.
func TestNPDConfigVerdicts(t *testing.T) {
	const kubelet, ntp = "health-checker-kubelet.json", "custom-plugin-monitor.json"
	tests := []struct {
		name     string
		file     string
		old, new string // the edit
		npdErr   string // NPD's rule that refuses it; empty: NPD loads it
		wantErr  string // selftaint's error; empty: it loads
		differs  string // why selftaint's verdict is not NPD's
	}{
		// NPD refuses: so does selftaint.
		{name: "other plugin", file: kubelet, old: `"plugin": "custom"`, new: `"plugin": "journald"`,
			npdErr: `NPD does not support "journald" plugin`, wantErr: `this is an NPD system-log-monitor file (plugin "journald"), not a custom-plugin-monitor file`},
		{name: "a plugin of neither monitor", file: kubelet, old: `"plugin": "custom"`, new: `"plugin": "other"`,
			npdErr: `NPD does not support "other" plugin`, wantErr: `plugin: "other" is not supported, only "custom"`},
		{name: "global timeout unparsable", file: kubelet, old: `"timeout": "3m",`, new: `"timeout": "3 minutes",`,
			npdErr: "error in parsing global timeout", wantErr: `pluginConfig.timeout: time: unknown unit`},
		{name: "global interval unparsable", file: kubelet, old: `"invoke_interval": "10s"`, new: `"invoke_interval": "10"`,
			npdErr: "error in parsing invoke interval", wantErr: `pluginConfig.invoke_interval: time: missing unit in duration "10"`},
		{name: "global interval zero", file: kubelet, old: `"invoke_interval": "10s"`, new: `"invoke_interval": "0s"`,
			npdErr: "global invoke interval must be greater than zero", wantErr: `pluginConfig.invoke_interval: "0s" must be positive`},
		{name: "rule timeout above global", file: kubelet, old: `"timeout": "3m"
    }`, new: `"timeout": "4m"
    }`,
			npdErr: "plugin timeout is greater than global timeout", wantErr: "rules[0].timeout: 4m0s is above pluginConfig.timeout 3m0s"},
		{name: "rule timeout unparsable", file: ntp, old: `"timeout": "3s"
    },`, new: `"timeout": "3"
    },`,
			npdErr: "error in parsing rule timeout", wantErr: `rules[0].timeout: time: missing unit`},
		{name: "rule interval unparsable", file: ntp, old: `"timeout": "3s"
    },`, new: `"timeout": "3s", "invoke_interval": "often"
    },`,
			npdErr: "error in parsing rule invoke interval", wantErr: `rules[0].invoke_interval: time: invalid duration "often"`},
		{name: "rule interval negative", file: kubelet, old: `"timeout": "3m"
    }`, new: `"timeout": "3m", "invoke_interval": "-10s"
    }`,
			npdErr: "rule invoke interval must be greater than zero", wantErr: `rules[0].invoke_interval: "-10s" must be positive`},
		{name: "permanent rule without its condition", file: kubelet, old: `"condition": "KubeletUnhealthy"`, new: `"condition": "KubeletDown"`,
			npdErr: "permanent problem KubeletDown does not have preset default condition", wantErr: `rules[0].condition: "KubeletDown" is not defined in conditions`},
		{name: "rule without path", file: kubelet, old: `"path": "/home/kubernetes/bin/health-checker",`, new: `"path": "",`,
			npdErr: `rule path "" does not exist`, wantErr: "rules[0].path: must not be empty"},
		{name: "not JSON", file: kubelet, old: `"plugin": "custom",`, new: `"plugin": "custom"`,
			npdErr: "Failed to unmarshal", wantErr: "NPD config x.json: invalid character"},
		{name: "wrong JSON type", file: kubelet, old: `"concurrency": 1`, new: `"concurrency": "1"`,
			npdErr: "Failed to unmarshal", wantErr: "pluginConfig.concurrency: cannot unmarshal string"},

		// NPD loads: so does selftaint.
		{name: "unchanged", file: kubelet},
		{name: "timeout above the interval", file: kubelet, old: `"invoke_interval": "10s"`, new: `"invoke_interval": "1s"`},
		{name: "rule interval of its own", file: kubelet, old: `"timeout": "3m"
    }`, new: `"timeout": "3m", "invoke_interval": "1m"
    }`},
		{name: "rule type NPD runs as permanent", file: kubelet, old: `"type": "permanent"`, new: `"type": "Permanent"`},
		{name: "condition given twice", file: kubelet, old: `"conditions": [`, new: `"conditions": [{"type": "KubeletUnhealthy", "reason": "Other"},`},

		// Where the verdicts differ, on purpose.
		{name: "unknown key", file: kubelet, old: `"concurrency": 1`, new: `"concurrency": 1, "concurency": 2`,
			wantErr: `unknown field "pluginConfig.concurency"`, differs: "the strict decoder: NPD ignores a mistyped key and runs with the default"},
		{name: "key in another case", file: kubelet, old: `"source"`, new: `"Source"`,
			wantErr: `unknown field "Source"`, differs: "the strict decoder: keys are case-sensitive"},
		{name: "rule timeout zero", file: kubelet, old: `"timeout": "3m"
    }`, new: `"timeout": "0s"
    }`,
			wantErr: `rules[0].timeout: "0s" must be positive (NPD loads it, then starts no plugin)`, differs: "NPD starts no plugin with a deadline already past"},
		{name: "concurrency zero", file: kubelet, old: `"concurrency": 1`, new: `"concurrency": 0`,
			wantErr: "pluginConfig.concurrency: 0 must be positive (NPD loads it, then hangs or crashes)", differs: "NPD's slot channel has no room: no plugin ever runs"},
		{name: "max output length negative", file: kubelet, old: `"max_output_length": 80`, new: `"max_output_length": -1`,
			wantErr: "pluginConfig.max_output_length: -1 must be positive", differs: "NPD slices its output with it and panics"},
		{name: "condition without reason", file: kubelet, old: `"reason": "KubeletIsHealthy",`, new: ``,
			wantErr: "conditions[0].reason: must not be empty", differs: "NPD would publish the condition with an empty reason"},
		{name: "rule without reason", file: kubelet, old: `"reason": "KubeletUnhealthy",`, new: ``,
			wantErr: "rules[0].reason: must not be empty", differs: "NPD would publish the problem with an empty reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := readNPD(t, tt.file)
			if tt.old != "" {
				data = edit(t, tt.file, tt.old, tt.new)
			}
			npdErr := npdValidate(data)
			probestest.CheckError(t, "NPD", npdErr, tt.npdErr)
			_, err := ParseNPDConfig(data, "x.json", NPDOptions{})
			probestest.CheckError(t, "selftaint", err, tt.wantErr)
			if sameVerdict := (npdErr == nil) == (err == nil); sameVerdict != (tt.differs == "") {
				t.Errorf("NPD's error %v, selftaint's %v: verdicts %s, but the table says %q", npdErr, err, map[bool]string{true: "agree", false: "differ"}[sameVerdict], tt.differs)
			}
		})
	}
}

// TestLoadNPDConfigMissingPlugins: NPD refuses a file whose plugin is not
// there; selftaint loads it, warns naming the field, and the run fails.
func TestLoadNPDConfigMissingPlugins(t *testing.T) {
	c, err := LoadNPDConfig(filepath.Join("testdata", "npd", "health-checker-kubelet.json"), NPDOptions{PluginRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := "rules[0].path: stat " + c.Conditions[0].Rules[0].Path + ": no such file or directory; NPD refuses the file, selftaint loads it and reports the plugin's failure to run"
	if got := c.Warnings; len(got) != 1 || got[0] != want {
		t.Errorf("got warnings %q, want [%q]", got, want)
	}
}

func TestNPDPluginRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "home/kubernetes/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeScript(t, filepath.Join(root, "home/kubernetes/bin"), "health-checker", "exit 0\n")
	c, err := LoadNPDConfig(filepath.Join("testdata", "npd", "health-checker-kubelet.json"), NPDOptions{PluginRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Conditions[0].Rules[0]
	want := Rule{
		Name:   "/home/kubernetes/bin/health-checker --component=kubelet --enable-repair=true --cooldown-time=1m --loopback-time=0 --health-check-timeout=10s",
		Reason: "KubeletUnhealthy", Path: filepath.Join(root, "home/kubernetes/bin/health-checker"),
		Args:     []string{"--component=kubelet", "--enable-repair=true", "--cooldown-time=1m", "--loopback-time=0", "--health-check-timeout=10s"},
		Interval: 10 * time.Second, Timeout: 3 * time.Minute,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got rule %+v, want %+v", got, want)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("got warnings %q, want none: the plugin is there", c.Warnings)
	}
	// Relative paths and bare names are not rooted.
	c, err = ParseNPDConfig(readNPD(t, "custom-plugin-monitor.json"), "x.json", NPDOptions{PluginRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Conditions[0].Rules[0].Path, "./config/plugin/check_ntp.sh"; got != want {
		t.Errorf("got path %q, want %q", got, want)
	}
}

func TestLoadNPDConfig(t *testing.T) {
	ntpRule := Rule{Reason: "NTPIsDown", Path: "./config/plugin/check_ntp.sh", Interval: 30 * time.Second, Timeout: 3 * time.Second}
	const missing = "; NPD refuses the file, selftaint loads it and reports the plugin's failure to run"
	tests := []struct {
		file string
		want NPDConfig
	}{
		{
			file: "ntp.json",
			want: NPDConfig{
				Source: "ntp-custom-plugin-monitor", InvokeInterval: 30 * time.Second, Timeout: 5 * time.Second,
				MaxOutputLength: 80, Concurrency: 3, MetricsReporting: true,
				Conditions: []Condition{{Type: "NTPProblem", Reason: "NTPIsUp", Message: "ntp service is up", Rules: []Rule{ntpRule}, Events: []Rule{ntpRule}, NPD: true}},
				Warnings: []string{
					"rules[0].path: stat ./config/plugin/check_ntp.sh: no such file or directory" + missing,
					"rules[1].path: stat ./config/plugin/check_ntp.sh: no such file or directory" + missing,
				},
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
					}, Events: []Rule{
						{Reason: "OOMKilling", Path: "/usr/local/bin/check-oom", Interval: time.Minute, Timeout: 10 * time.Second},
					}, NPD: true, MessageUpdates: true},
					{Type: "DNSProblem", Reason: "DNSIsUp", Message: "DNS resolves", Rules: []Rule{
						{Reason: "ClusterDNSDown", Path: "/usr/local/bin/check-dns", Args: []string{"kubernetes.default.svc"}, Interval: 20 * time.Second, Timeout: 5 * time.Second},
						{Reason: "UpstreamDNSDown", Path: "check-dns", Args: []string{"example.com"}, Interval: time.Minute, Timeout: 10 * time.Second},
					}, NPD: true, MessageUpdates: true},
				},
				Warnings: []string{
					"conditions[1] (DNSProblem): NPD's own tainting (taintEnabled) is ignored; selftaint taints nodes through its rules",
					"condition NeverChecked has no permanent rule; selftaint does not report it",
					"rules[0].path: stat /usr/local/bin/check-conntrack: no such file or directory" + missing,
					"rules[1].path: stat /usr/local/bin/check-dns: no such file or directory" + missing,
					`rules[2].path: exec: "check-dns": executable file not found in $PATH` + missing,
					"rules[3].path: stat /usr/local/bin/check-oom: no such file or directory" + missing,
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			got, err := LoadNPDConfig(path, NPDOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got.plugins = nil
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
		{"rule timeout zero", conf("", `{"type":"permanent","condition":"C","reason":"Down","path":"/x","timeout":"0s"}`), `rules[0].timeout: "0s" must be positive (NPD loads it, then starts no plugin)`},
		{"bad rule interval", conf("", `{"type":"permanent","condition":"C","reason":"Down","path":"/x","invoke_interval":"-1s"}`), `rules[0].invoke_interval: "-1s" must be positive`},
		{"timeout equal to the interval", conf(`"invoke_interval":"5s"`, perm), ""},
		{"timeout above another rule's interval", conf(`"timeout":"10s"`, perm+`,{"type":"permanent","condition":"C","reason":"R","path":"/y","invoke_interval":"1s","timeout":"2s"}`), ""},
		{"undefined condition", conf("", `{"type":"permanent","condition":"Other","reason":"Down","path":"/x"}`), `rules[0].condition: "Other" is not defined in conditions`},
		{"permanent rule without reason", conf("", `{"type":"permanent","condition":"C","path":"/x"}`), "rules[0].reason: must not be empty"},
		{"temporary rule without reason", conf("", perm+`,{"type":"temporary","path":"/x"}`), "rules[1].reason: must not be empty"},
		{"rule without path", conf("", `{"type":"permanent","condition":"C","reason":"Down"}`), "rules[0].path: must not be empty"},
		{"condition without type", `{"plugin":"custom","conditions":[{"reason":"Up"}],"rules":[]}`, "conditions[0].type: must not be empty"},
		{"condition without reason", `{"plugin":"custom","conditions":[{"type":"C"}],"rules":[]}`, "conditions[0].reason: must not be empty"},
		{"bad transition", `{"plugin":"custom","conditions":[{"type":"C","reason":"Up","transition":"yesterday"}],"rules":[]}`, `parsing time "yesterday"`},
		{"errors reported together", conf(`"timeout":"x","concurrency":-1`, `{"type":"permanent","condition":"D","path":""}`), "pluginConfig.timeout: time: invalid duration \"x\"\npluginConfig.concurrency: -1 must be positive (NPD loads it, then hangs or crashes)\nrules[0].path: must not be empty\nrules[0].reason: must not be empty\nrules[0].condition"},
	}
	for _, tt := range tests {
		_, err := ParseNPDConfig([]byte(tt.in), "x.json", NPDOptions{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}

// TestParseNPDConfigAsNPDRunsIt covers what NPD loads that a reader might
// expect refused: each loads as NPD runs it, with a warning.
func TestParseNPDConfigAsNPDRunsIt(t *testing.T) {
	conf := func(conds, rules string) string {
		return `{"plugin":"custom","conditions":[` + conds + `],"rules":[` + rules + `]}`
	}
	tests := []struct {
		name           string
		in             string
		wantRules      []string // the reasons of each condition's rules, joined by ","
		wantEvents     int      // events rules of the first condition, or of the events-only one
		wantEventsOnly string   // the events-only condition's name; empty: none
		wantWarnings   []string // substrings, one per warning
	}{
		{
			name:      "other rule type runs as permanent",
			in:        conf(`{"type":"C","reason":"Up"}`, `{"type":"perm","condition":"C","reason":"Down","path":"/x"}`),
			wantRules: []string{"Down"}, wantWarnings: []string{`rules[0].type: "perm" is neither "temporary" nor "permanent"; NPD runs it as permanent, and so does selftaint`},
		},
		{
			name:      "other rule type without its condition does nothing",
			in:        conf(`{"type":"C","reason":"Up"}`, `{"type":"permanent","condition":"C","reason":"Down","path":"/x"},{"type":"perm","condition":"D","reason":"Down","path":"/x"}`),
			wantRules: []string{"Down"}, wantWarnings: []string{`rules[1].type: "perm" is neither "temporary" nor "permanent", and its condition "D" is not defined; NPD runs it to no effect, selftaint does not run it`},
		},
		{
			name:      "the first of two conditions of a type",
			in:        conf(`{"type":"C","reason":"Up"},{"type":"C","reason":"Other"}`, `{"type":"permanent","condition":"C","reason":"Down","path":"/x"}`),
			wantRules: []string{"Down"}, wantWarnings: []string{`conditions[1].type: "C" is also conditions[0]; NPD uses the first, and so does selftaint`},
		},
		{
			name:      "temporary rules go with the first condition",
			in:        conf(`{"type":"C","reason":"Up"},{"type":"D","reason":"Up"}`, `{"type":"temporary","reason":"T1","path":"/t"},{"type":"permanent","condition":"D","reason":"Down","path":"/x"},{"type":"temporary","reason":"T2","path":"/t","condition":"ignored"},{"type":"permanent","condition":"C","reason":"Down","path":"/x"}`),
			wantRules: []string{"Down", "Down"}, wantEvents: 2,
		},
		{
			name:       "temporary rules of a file without a condition: an events-only probe runs them",
			in:         conf(``, `{"type":"temporary","reason":"T1","path":"/t"},{"type":"temporary","reason":"T2","path":"/u"}`),
			wantRules:  nil,
			wantEvents: 2, wantEventsOnly: "npd:x",
		},
		{
			name:       "temporary rules of a file whose only condition has no permanent rule",
			in:         conf(`{"type":"C","reason":"Up"}`, `{"type":"temporary","reason":"T1","path":"/t"}`),
			wantRules:  nil,
			wantEvents: 1, wantEventsOnly: "npd:x", wantWarnings: []string{"condition C has no permanent rule; selftaint does not report it"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseNPDConfig([]byte(tt.in), "x.json", NPDOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cond := range c.Conditions {
				var reasons []string
				for _, r := range cond.Rules {
					reasons = append(reasons, r.Reason)
				}
				got = append(got, strings.Join(reasons, ","))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wantRules) {
				t.Errorf("got rules %q, want %q", got, tt.wantRules)
			}
			var events []Rule
			var eventsOnly string
			switch {
			case c.EventsOnly != nil:
				events, eventsOnly = c.EventsOnly.Events, c.EventsOnly.Name
				if c.EventsOnly.Type != "" || len(c.EventsOnly.Rules) != 0 || !c.EventsOnly.NPD {
					t.Errorf("events-only condition %+v: want no type, no rules, marked NPD", *c.EventsOnly)
				}
			case len(c.Conditions) > 0:
				events = c.Conditions[0].Events
			}
			if len(events) != tt.wantEvents || eventsOnly != tt.wantEventsOnly {
				t.Errorf("got %d events rules, events-only %q; want %d, %q", len(events), eventsOnly, tt.wantEvents, tt.wantEventsOnly)
			}
			if len(c.Warnings) != len(tt.wantWarnings) {
				t.Fatalf("got warnings %q, want %q", c.Warnings, tt.wantWarnings)
			}
			for i, w := range tt.wantWarnings {
				if !strings.Contains(c.Warnings[i], w) {
					t.Errorf("got warning %q, want it to contain %q", c.Warnings[i], w)
				}
			}
		})
	}
}

func TestLoadNPDConfigMissing(t *testing.T) {
	_, err := LoadNPDConfig(filepath.Join("testdata", "missing.json"), NPDOptions{})
	probestest.CheckError(t, "missing", err, "reading NPD config: open testdata/missing.json: no such file or directory")
}

// TestSystemLogMonitorFilesAreNamed: NPD's system-log-monitor files (its
// kernel-monitor.json among them) given as custom-plugin-monitor files are
// refused as what they are, not by the first field a custom-plugin-monitor
// file lacks (issue 28: "unknown field \"bufferSize\"" and nothing else).
func TestSystemLogMonitorFilesAreNamed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "logmon", "testdata", "npd", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("NPD's system-log-monitor files: %v %v", files, err)
	}
	for _, path := range files {
		_, err := LoadNPDConfig(path, NPDOptions{})
		var lm *LogMonitorFileError
		if !errors.As(err, &lm) {
			t.Errorf("%s: got error %v, want a *LogMonitorFileError", path, err)
			continue
		}
		if lm.Plugin == "" {
			t.Errorf("%s: the error %q names no plugin", path, err)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "is an NPD system-log-monitor file") || strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: got error %q, want it to name the file and say it is a system-log-monitor file", path, err)
		}
	}
	_, err = LoadNPDConfig(filepath.Join("..", "logmon", "testdata", "npd", "kernel-monitor.json"), NPDOptions{})
	probestest.CheckError(t, "kernel-monitor.json", err, `NPD config ../logmon/testdata/npd/kernel-monitor.json: this is an NPD system-log-monitor file (plugin "kmsg"; logPath, lookback, bufferSize), not a custom-plugin-monitor file`)

	tests := []struct {
		name, in, wantErr string
	}{
		{"a log monitor's field without its plugin", `{"plugin":"custom","bufferSize":10}`, `this is an NPD system-log-monitor file (bufferSize), not a custom-plugin-monitor file`},
		{"a log monitor's plugin alone", `{"plugin":"journald"}`, `this is an NPD system-log-monitor file (plugin "journald"), not a custom-plugin-monitor file`},
		{"another plugin is not a log monitor's", `{"plugin":"other","conditions":[],"rules":[]}`, `plugin: "other" is not supported, only "custom"`},
		{"a custom file's unknown field", `{"plugin":"custom","sources":"s"}`, `unknown field "sources"`},
	}
	for _, tt := range tests {
		_, err := ParseNPDConfig([]byte(tt.in), "x.json", NPDOptions{})
		probestest.CheckError(t, tt.name, err, tt.wantErr)
	}
}
