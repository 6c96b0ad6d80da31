package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
)

const policyParamsUsage = `Usage: selftaint policy-params [--config FILE]

Prints what the config lets the agent own on its Node — taint keys, labels,
condition types, extended resources — as the data entries the admission
policy (deploy/admission-policy.yaml) reads from the ConfigMap that holds
config.yaml. Put them beside config.yaml whenever the config changes: the API
server denies the agent's writes of anything not listed, and lets a stolen
agent token change nothing else. NPD files named in checks.npdConfigs are read
for their conditions.

`

// runPolicyParams is `selftaint policy-params`.
func runPolicyParams(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint policy-params", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, policyParamsUsage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "config file (YAML); empty means the built-in defaults")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	checks, err := cfg.CheckConditions(slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, config.FormatPolicyParams(config.PolicyParams(cfg.Ownership(checks))))
	return err
}

// readPolicyParams reads the policy parameters mounted beside the config
// file (the DaemonSet mounts the whole ConfigMap): nil when there are none.
func readPolicyParams(dir string) (map[string]string, error) {
	var have map[string]string
	for _, k := range config.ParamKeys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the admission policy's parameters: %w", err)
		}
		if have == nil {
			have = map[string]string{}
		}
		have[k] = string(b)
	}
	return have, nil
}

// checkPolicyParamsBeside warns when the admission policy's parameters
// beside the config file do not match what the config lets the agent own:
// the API server would deny those writes (or allow more than needed). The
// agent runs either way; the policy decides.
func checkPolicyParamsBeside(configPath string, own agent.Ownership, log *slog.Logger) {
	if configPath == "" {
		return
	}
	dir := filepath.Dir(configPath)
	have, err := readPolicyParams(dir)
	if err != nil {
		log.Warn("could not check the admission policy's parameters", "err", err)
		return
	}
	if have == nil {
		log.Debug("no admission policy parameters beside the config file; not checked", "dir", dir)
		return
	}
	missing, extra := config.CheckPolicyParams(config.PolicyParams(own), have)
	for _, m := range missing {
		log.Warn("the admission policy's parameters do not cover the config: the API server will deny these writes; update the ConfigMap (selftaint policy-params)", "dir", dir, "problem", m)
	}
	for _, e := range extra {
		log.Info("the admission policy's parameters allow more than the config needs", "dir", dir, "detail", e)
	}
}
