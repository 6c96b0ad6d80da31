package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// checkRow is one probe's line in selftaint check. An events-only probe's
// has no condition (its Events are in the Result).
type checkRow struct {
	probes.Result
	Condition       corev1.NodeConditionType `json:"condition,omitempty"`
	ConditionStatus corev1.ConditionStatus   `json:"conditionStatus,omitempty"`
}

// checkReport is selftaint check's whole output.
type checkReport struct {
	Probes []checkRow `json:"probes"`
	// GPUSupport is "on", or why it is off.
	GPUSupport string `json:"gpuSupport"`
	// Hardware is the special-hardware inventory.
	Hardware []agent.Resource `json:"hardware"`
	Taints   []corev1.Taint   `json:"taints"`
	// WithGrant are the NoExecute taints that would join Taints while the
	// node holds a NoExecute grant from the coordinator.
	WithGrant []corev1.Taint `json:"withGrant,omitempty"`
	// Drain is the sick-node drain request the agent would write (rules
	// with action: drain), without its requestedBy and requestedAt.
	Drain *fleet.MaintenanceRequest `json:"drain,omitempty"`
	// drainRules says the config has rules with action: drain.
	drainRules bool
	// Warnings are the config's settings that are valid but risky, each
	// naming its field (the agent logs the same at start-up).
	Warnings []string `json:"warnings,omitempty"`
	// LogMonitors are the system-log-monitor files' conditions and last
	// matches (checks.npdLogConfigs).
	LogMonitors []logMonitorReport `json:"logMonitors,omitempty"`
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hostRoot := fs.String("host-root", "/", "where the host's filesystem is mounted")
	configPath := fs.String("config", "", "config file (YAML); empty means the built-in defaults")
	output := fs.String("output", "table", "table or json")
	logQuiet := fs.Duration("log-quiet", 300*time.Millisecond, "the log monitors (checks.npdLogConfigs) read their logs until no line has come for this long...")
	logWait := fs.Duration("log-wait", 5*time.Second, "...or for at most this long; then check reports what they matched")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("--output must be table or json, not %q", *output)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	m, err := openMachine(cfg, probes.Host{Root: *hostRoot}, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	defer m.close()
	mons, monProbes := logMonitors(m.specs)
	readLogs(ctx, mons, monProbes, *logQuiet, *logWait)
	rep := checkReport{Probes: check(ctx, m.specs), GPUSupport: "on", Warnings: cfg.Warnings()}
	rep.LogMonitors = logReports(mons, rep.Probes)
	if m.gpuOff != "" {
		rep.GPUSupport = m.gpuOff
	}
	if rep.Hardware, err = m.inventory.Inventory(ctx); err != nil {
		return fmt.Errorf("hardware inventory: %w", err)
	}
	rep.Taints = wouldTaint(cfg.TaintRules(), rep.Probes, rep.Hardware, time.Now(), false)
	rep.WithGrant = withGrant(rep.Taints, wouldTaint(cfg.TaintRules(), rep.Probes, rep.Hardware, time.Now(), true))
	rep.Drain, rep.drainRules = wouldDrain(cfg.DrainRules(), rep.Probes), len(cfg.DrainRules()) > 0
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printCheck(stdout, rep)
}

// check runs every probe once, without damping: it shows what the agent
// would conclude if the readings held.
func check(ctx context.Context, specs []agent.ProbeSpec) []checkRow {
	rows := make([]checkRow, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			res := probes.RunOnce(ctx, s.Entry.Probe, s.Entry.Timeout, probes.RealClock{})
			rows[i] = checkRow{Result: res}
			if !s.EventsOnly() {
				rows[i].Condition, rows[i].ConditionStatus = s.Condition, agent.ConditionStatus(res.Status, s.HealthyStatus())
			}
		})
	}
	wg.Wait()
	return rows
}

// withGrant is the taints in granted that are not in plain: the NoExecute
// taints a grant adds.
func withGrant(plain, granted []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range granted {
		if !slices.ContainsFunc(plain, func(p corev1.Taint) bool { return taints.IDOf(p) == taints.IDOf(t) }) {
			out = append(out, t)
		}
	}
	return out
}

// wouldTaint is the taints the agent's plan (taints.PlanMetadata) puts on a
// Node that carries none yet, for these conditions and this hardware: what
// check prints is by construction what the agent would write, without a
// NoExecute grant, or with one when granted. The time a NoExecute taint
// would be added is left out: it would be the write's.
func wouldTaint(rules []taints.Rule, rows []checkRow, hw []agent.Resource, now time.Time, granted bool) []corev1.Taint {
	statuses := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	gates := map[corev1.NodeConditionType]taints.Gate{}
	for _, r := range rows {
		if r.Condition == "" {
			continue // events only
		}
		statuses[r.Condition] = r.ConditionStatus
		gates[r.Condition] = taints.Gate{NoExecute: granted}
	}
	p := taints.PlanMetadata(taints.MetadataInput{
		Node: &corev1.Node{}, Now: now, Rules: rules, Statuses: statuses,
		Hardware: hw, HardwareKnown: true, Gates: gates,
	})
	out := make([]corev1.Taint, len(p.Taints.Taints))
	for i, t := range p.Taints.Taints {
		t.TimeAdded = nil
		out[i] = t
	}
	return out
}

// wouldDrain is the drain request the agent's plan
// (taints.PlanDrainRequest) puts on a Node that carries none yet, for these
// conditions; nil when no drain rule applies. Who and when are left out:
// they would be the agent's.
func wouldDrain(rules []taints.DrainRule, rows []checkRow) *fleet.MaintenanceRequest {
	states := map[corev1.NodeConditionType]taints.State{}
	for _, r := range rows {
		if r.Condition != "" {
			states[r.Condition] = taints.State{Status: r.ConditionStatus, Reason: r.Reason, Message: r.Message}
		}
	}
	p := taints.PlanDrainRequest(&corev1.Node{}, taints.DrainInput{Rules: rules, States: states}, time.Now())
	if p.Value == "" {
		return nil
	}
	r, err := fleet.ParseMaintenanceRequest(fleet.AgentRequestAnnotation, p.Value)
	if err != nil {
		return nil // the plan writes only requests that parse (its tests say so)
	}
	r.RequestedBy, r.RequestedAt = "", time.Time{}
	return &r
}

// printDrain tells the drain request check found the agent would make.
func printDrain(w io.Writer, r *fleet.MaintenanceRequest) {
	if r == nil {
		fmt.Fprint(w, "Drain that would be requested: none\n\n")
		return
	}
	deadline := r.Deadline
	if deadline == "" {
		deadline = "the coordinator's maintenance.defaultDeadline"
	}
	fmt.Fprintf(w, "Drain that would be requested from the coordinator (within the maintenance pool and the disruption guard):\n  %s\n  deadline %s", r.Reason, deadline)
	if r.EvictUnreplicated {
		fmt.Fprint(w, ", evictUnreplicated")
	}
	if r.DeleteEmptyDirData {
		fmt.Fprint(w, ", deleteEmptyDirData")
	}
	fmt.Fprint(w, "\n\n")
}

func printCheck(w io.Writer, rep checkReport) error {
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if len(rep.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tVERDICT\tCONDITION\tSTATUS\tREASON\tREADINGS")
	for _, r := range rep.Probes {
		var rd []string
		for _, x := range r.Readings {
			rd = append(rd, x.Name+"="+x.Value)
		}
		cond, status := string(r.Condition), string(r.ConditionStatus)
		if cond == "" {
			cond, status = "-", "-" // events only
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Probe, r.Status, cond, status, r.Reason, strings.Join(rd, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range rep.Probes {
		fmt.Fprintf(w, "%s: %s\n", r.Probe, r.Message)
		for _, e := range r.Events {
			fmt.Fprintf(w, "%s: event %s: %s\n", r.Probe, e.Reason, e.Message)
		}
	}
	fmt.Fprintln(w)
	if err := printLogMonitors(w, rep.LogMonitors); err != nil {
		return err
	}
	fmt.Fprintf(w, "GPU support: %s\n", rep.GPUSupport)
	printHardware(w, rep.Hardware)
	fmt.Fprintln(w)
	if rep.drainRules {
		printDrain(w, rep.Drain)
	}
	if len(rep.Taints) == 0 {
		fmt.Fprintln(w, "Taints that would follow: none")
		return nil
	}
	fmt.Fprintln(w, "Taints that would follow:")
	for _, t := range rep.Taints {
		fmt.Fprintf(w, "  %s\n", taints.Format(t))
	}
	if len(rep.WithGrant) > 0 {
		fmt.Fprintln(w, "And while the node holds a NoExecute grant from the coordinator (budget, rate and disruption guard permitting):")
		for _, t := range rep.WithGrant {
			fmt.Fprintf(w, "  %s\n", taints.Format(t))
		}
	}
	return nil
}

// printHardware tells the special-hardware inventory and what selftaint
// would do with it.
func printHardware(w io.Writer, hw []agent.Resource) {
	if len(hw) == 0 {
		fmt.Fprintln(w, "Special hardware: none configured or found")
	} else {
		fmt.Fprintln(w, "Special hardware:")
		for _, r := range hw {
			var does []string
			if r.Advertise {
				does = append(does, "advertise")
			}
			if r.Taint {
				does = append(does, "taint")
			}
			if r.Label {
				does = append(does, "label "+agent.HardwareLabel(r.Name))
			}
			fmt.Fprintf(w, "  %s: %d", r.Name, r.Count)
			if r.Detail != "" {
				fmt.Fprintf(w, " (%s)", r.Detail)
			}
			fmt.Fprintf(w, "; selftaint would %s\n", strings.Join(does, ", "))
		}
	}
}
