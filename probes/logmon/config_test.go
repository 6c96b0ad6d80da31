package logmon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// npdLoads is NPD's own verdict on a system-log-monitor config: what
// NewLogMonitorOrDie does before it starts reading (json.Unmarshal,
// ApplyDefaultConfiguration, compileRules, GetLogWatcherOrDie and the
// watcher constructors' util.GetStartTime, filelog's regexp.MustCompile
// of its pluginConfig, NewLogBuffer's make), transcribed from
// pkg/systemlogmonitor at the commit in testdata/npd/README.md. A Fatal or
// panic there is an error here.
func npdLoads(data []byte) error {
	var c struct {
		Plugin       string            `json:"plugin,omitempty"`
		PluginConfig map[string]string `json:"pluginConfig,omitempty"`
		SkipList     []string          `json:"skipList,omitempty"`
		LogPath      string            `json:"logPath,omitempty"`
		Lookback     string            `json:"lookback,omitempty"`
		Delay        string            `json:"delay,omitempty"`
		BufferSize   int               `json:"bufferSize"`
		Source       string            `json:"source"`
		Conditions   []struct {
			Type       string    `json:"type"`
			Status     string    `json:"status"`
			Transition time.Time `json:"transition"`
			Reason     string    `json:"reason"`
			Message    string    `json:"message"`
		} `json:"conditions"`
		Rules []struct {
			Type      string `json:"type"`
			Condition string `json:"condition"`
			Reason    string `json:"reason"`
			Pattern   string `json:"pattern"`
			Suffix    string `json:"patternGeneratedMessageSuffix,omitempty"`
		} `json:"rules"`
		EnableMetricsReporting *bool `json:"metricsReporting,omitempty"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("Failed to unmarshal configuration file: %v", err)
	}
	for _, r := range c.Rules {
		if _, err := regexp.Compile(r.Pattern); err != nil {
			return err
		}
		if _, err := regexp.Compile(r.Pattern + `\z`); err != nil {
			return err
		}
	}
	switch c.Plugin {
	case "kmsg", "journald", "filelog":
	default:
		return fmt.Errorf("No create function found for plugin %q", c.Plugin)
	}
	for _, d := range []string{c.Delay, c.Lookback} {
		if d == "" {
			continue
		}
		if _, err := time.ParseDuration(d); err != nil {
			return err
		}
	}
	if c.Plugin == "filelog" {
		for _, k := range []string{"timestamp", "message"} {
			if _, err := regexp.Compile(c.PluginConfig[k]); err != nil {
				return err
			}
		}
	}
	if c.BufferSize < 0 {
		return fmt.Errorf("panic: makeslice: len out of range")
	}
	return nil
}

// TestShippedConfigsLoad: every Linux system-log-monitor config NPD ships
// loads, as NPD loads it, with what the file says.
func TestShippedConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/npd/*.json")
	if err != nil || len(files) != 8 {
		t.Fatalf("testdata/npd: %d files, %v; want the 8 of its README", len(files), err)
	}
	want := map[string]struct {
		plugin     string
		conditions int
		rules      int
	}{
		"kernel-monitor.json":           {PluginKmsg, 3, 14},
		"readonly-monitor.json":         {PluginKmsg, 1, 1},
		"kernel-monitor-filelog.json":   {PluginFilelog, 1, 0},
		"docker-monitor-filelog.json":   {PluginFilelog, 0, 0},
		"disk-log-message-filelog.json": {PluginFilelog, 1, 1},
		"docker-monitor.json":           {PluginJournald, 0, 0},
		"systemd-monitor.json":          {PluginJournald, 0, 0},
		"abrt-adaptor.json":             {PluginJournald, 0, 0},
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := npdLoads(data); err != nil {
				t.Fatalf("NPD refuses it: %v", err)
			}
			c, err := LoadConfig(path)
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if len(c.Warnings) > 0 {
				t.Errorf("warnings %q, want none", c.Warnings)
			}
			w := want[filepath.Base(path)]
			if c.Plugin != w.plugin {
				t.Errorf("plugin %q, want %q", c.Plugin, w.plugin)
			}
			if w.rules > 0 && (len(c.Conditions) != w.conditions || len(c.Rules) != w.rules) {
				t.Errorf("%d conditions, %d rules; want %d, %d", len(c.Conditions), len(c.Rules), w.conditions, w.rules)
			}
			var raw struct {
				Rules []json.RawMessage `json:"rules"`
			}
			if err := json.Unmarshal(data, &raw); err != nil {
				t.Fatal(err)
			}
			if len(c.Rules) != len(raw.Rules) {
				t.Errorf("%d rules, file has %d", len(c.Rules), len(raw.Rules))
			}
		})
	}
}

// TestParseConfigAgainstNPD: each variant of a valid file loads exactly
// when NPD loads it, except the deliberate differences, each with its
// reason; selftaint's errors name the file and the JSON field.
func TestParseConfigAgainstNPD(t *testing.T) {
	const base = `{"plugin": "kmsg", "logPath": "/dev/kmsg", "lookback": "5m", "bufferSize": 10, "source": "kernel-monitor",
"conditions": [{"type": "KernelDeadlock", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"}],
"rules": [{"type": "temporary", "reason": "OOMKilling", "pattern": "Killed process \\d+ (.+).*"},
 {"type": "permanent", "condition": "KernelDeadlock", "reason": "DockerHung", "pattern": "task docker:\\w+ blocked for more than \\w+ seconds\\."}]}`
	const filelog = `{"plugin": "filelog", "pluginConfig": {"timestamp": "^.{15}", "message": "kernel: \\[.*\\] (.*)", "timestampFormat": "Jan _2 15:04:05"},
"logPath": "/var/log/kern.log", "source": "kernel-monitor", "conditions": [], "rules": []}`
	const journald = `{"plugin": "journald", "pluginConfig": {"source": "dockerd"}, "logPath": "/var/log/journal", "source": "docker-monitor", "rules": []}`
	tests := []struct {
		name    string
		file    string
		wantErr []string // empty: loads; else substrings of the error
		// differs, when set, says why selftaint's verdict differs from NPD's.
		differs string
	}{
		{"kmsg", base, nil, ""},
		{"filelog", filelog, nil, ""},
		{"journald", journald, nil, ""},
		{"no logPath for kmsg", strings.Replace(base, `"logPath": "/dev/kmsg", `, "", 1), nil, ""},
		{"bufferSize 0 is 10", strings.Replace(base, `"bufferSize": 10`, `"bufferSize": 0`, 1), nil, ""},
		{"no lookback", strings.Replace(base, `"lookback": "5m", `, "", 1), nil, ""},
		{"delay", strings.Replace(base, `"lookback": "5m"`, `"lookback": "5m", "delay": "1m"`, 1), nil, ""},
		{"skipList", strings.Replace(base, `"lookback": "5m"`, `"lookback": "5m", "skipList": [" audit:"]`, 1), nil, ""},
		{"suffix", strings.Replace(base, `"reason": "OOMKilling",`, `"reason": "OOMKilling", "patternGeneratedMessageSuffix": "see go/oom",`, 1), nil, ""},
		{"metricsReporting false", strings.Replace(base, `"source"`, `"metricsReporting": false, "source"`, 1), nil, ""},
		{"unknown plugin", strings.Replace(base, `"kmsg"`, `"syslog"`, 1), []string{"plugin:", `"syslog" is not supported`}, ""},
		{"custom plugin", strings.Replace(base, `"kmsg"`, `"custom"`, 1), []string{"plugin:"}, ""},
		{"bad pattern", strings.Replace(base, `(.+).*`, `(.+`, 1), []string{"rules[0].pattern:", "missing closing )"}, ""},
		{"bad lookback", strings.Replace(base, `"5m"`, `"5 minutes"`, 1), []string{"lookback:"}, ""},
		{"bad delay", strings.Replace(base, `"lookback": "5m"`, `"delay": "soon"`, 1), []string{"delay:"}, ""},
		{"negative bufferSize", strings.Replace(base, `"bufferSize": 10`, `"bufferSize": -1`, 1), []string{"bufferSize:"}, ""},
		{"not JSON", `{"plugin": "kmsg",`, []string{"NPD log config"}, ""},
		{"bufferSize a string", strings.Replace(base, `"bufferSize": 10`, `"bufferSize": "10"`, 1), []string{"bufferSize"}, ""},
		{"filelog bad timestamp regexp", strings.Replace(filelog, `"^.{15}"`, `"^(.{15}"`, 1), []string{"pluginConfig.timestamp:"}, ""},

		{"unknown key", strings.Replace(base, `"lookback"`, `"lookbak": "1m", "lookback"`, 1), []string{`unknown field "lookbak"`},
			"a misspelt key is ignored by encoding/json: the setting silently does not apply"},
		{"key case", strings.Replace(base, `"bufferSize"`, `"BufferSize"`, 1), []string{`unknown field "BufferSize"`},
			"encoding/json matches keys case-insensitively; the shared strict decoder does not"},
		{"duplicate key", strings.Replace(base, `"source"`, `"source": "a", "source"`, 1), []string{`duplicate field "source"`},
			"the last of two values wins silently in NPD"},
		{"negative lookback", strings.Replace(base, `"5m"`, `"-5m"`, 1), []string{"lookback:", "negative"},
			"NPD starts reading in the future and skips every line until then"},
		{"filelog without format", strings.Replace(filelog, `"timestampFormat": "Jan _2 15:04:05"`, `"x": ""`, 1), []string{"pluginConfig.timestampFormat:"},
			"NPD logs an error and then fails to parse every line"},
		{"filelog without logPath", strings.Replace(filelog, `"logPath": "/var/log/kern.log", `, "", 1), []string{"logPath:"},
			"NPD's watcher cannot open an empty path"},
		{"journald without source", strings.Replace(journald, `"source": "dockerd"`, `"x": "y"`, 1), []string{"pluginConfig.source:"},
			"NPD's journald watcher refuses to start without it"},
		{"permanent rule of no condition", strings.Replace(base, `"condition": "KernelDeadlock"`, `"condition": "KernelDeadLock"`, 1), []string{"rules[1].condition:", `"KernelDeadLock"`},
			"NPD never applies the rule: a misspelt condition silently disables it"},
		{"empty condition type", strings.Replace(base, `"type": "KernelDeadlock"`, `"type": ""`, 1), []string{"conditions[0].type:"},
			"a condition without a type cannot be reported"},
		{"condition twice", strings.Replace(base, `"conditions": [`, `"conditions": [{"type": "KernelDeadlock", "reason": "R"},`, 1), []string{"conditions[1].type:", "twice"},
			"NPD keeps both and sets only the first"},
		{"empty rule reason", strings.Replace(base, `"reason": "OOMKilling"`, `"reason": ""`, 1), []string{"rules[0].reason:"},
			"NPD would record Events and conditions without a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			npdErr := npdLoads([]byte(tt.file))
			_, err := ParseConfig([]byte(tt.file), "/etc/npd/k.json")
			npdOK, ours := npdErr == nil, err == nil
			if tt.differs == "" && npdOK != ours {
				t.Fatalf("NPD loads it: %v (%v); selftaint: %v (%v); no deliberate difference listed", npdOK, npdErr, ours, err)
			}
			if tt.differs != "" && npdOK == ours {
				t.Fatalf("listed as a deliberate difference (%s), but both load it: %v", tt.differs, ours)
			}
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one naming %q", tt.wantErr)
			}
			for _, w := range append([]string{"NPD log config /etc/npd/k.json: "}, tt.wantErr...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestParseConfigDefaults: NPD's defaults and a rule type NPD runs as
// permanent.
func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"plugin": "kmsg", "source": "s", "conditions": [{"type": "C", "reason": "Fine"}],
"rules": [{"type": "Permanent", "condition": "C", "reason": "Bad", "pattern": "bad"}]}`), "x.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.BufferSize != 10 || c.LogPath != "/dev/kmsg" || c.Lookback != 0 || !c.MetricsReporting {
		t.Errorf("got bufferSize %d, logPath %q, lookback %v, metrics %v; want 10, /dev/kmsg, 0, true", c.BufferSize, c.LogPath, c.Lookback, c.MetricsReporting)
	}
	if !c.Rules[0].Permanent || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "rules[0].type") {
		t.Errorf("got permanent %v, warnings %q; want permanent with a warning naming rules[0].type", c.Rules[0].Permanent, c.Warnings)
	}
}
