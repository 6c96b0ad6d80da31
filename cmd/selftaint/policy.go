package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
)

const policyParamsUsage = `Usage: selftaint policy-params [--config FILE]

Prints what the config lets the agent own on its Node — taints (key:Effect),
labels, condition types, extended resources — as the annotations the
admission policy (deploy/admission-policy.yaml) reads from itself. Put them
under the policy's metadata.annotations whenever the config changes: the API
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

// policyReader reads a ValidatingAdmissionPolicy by name.
type policyReader interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, error)
}

// checkAdmissionPolicy reads the admission policy that confines the agent
// and reports how its parameters compare with what the config lets the
// agent own: missing ones mean the API server will deny those writes, a
// missing policy means RBAC alone confines a stolen agent token. The agent
// runs either way; this only tells the operator.
func checkAdmissionPolicy(ctx context.Context, policies policyReader, name string, own agent.Ownership, log *slog.Logger) {
	if name == "" {
		return
	}
	vap, err := policies.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log.Warn("the admission policy is not installed: nothing but RBAC confines this agent's token (it may patch any Node); apply deploy/admission-policy.yaml", "policy", name)
		return
	case err != nil:
		log.Info("could not read the admission policy; its parameters are not checked", "policy", name, "err", err)
		return
	}
	missing, extra := config.CheckPolicyParams(config.PolicyParams(own), vap.Annotations)
	for _, m := range missing {
		log.Warn("the admission policy's parameters do not cover the config: the API server will deny these writes; update its annotations (selftaint policy-params)", "policy", name, "problem", m)
	}
	for _, e := range extra {
		log.Info("the admission policy's parameters allow more than the config needs", "policy", name, "detail", e)
	}
	if len(missing)+len(extra) == 0 {
		log.Debug("the admission policy's parameters match the config", "policy", name)
	}
}
