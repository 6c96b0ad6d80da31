// Command selftaint-demo is `make demo`: it shows a newcomer, in one run on
// their own machine, what selftaint does and why they can trust it with
// NoExecute and with drains. It starts a real control plane on loopback
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), six
// virtual nodes run by `selftaint virtual --coordinator` with a NoExecute
// budget of one node and a maintenance pool of one node, pods with
// different tolerations, and for the drains two Deployments and a
// StatefulSet behind PodDisruptionBudgets; asks `selftaint explain` what a
// NoExecute taint would do; and runs two parts, printing live every node's
// condition, taints, requests, grant, maintenance condition and cordon,
// the agents' Events and each eviction.
//
// Part 1, a NoExecute drill in two acts. Act 1 injects a fault on vnode-1
// with `selftaint fault inject`: the fallback NoSchedule taint lands at
// once, NoExecute joins it with the coordinator's grant, and the pods go as
// explain said. Act 2 injects the same fault on vnode-2 and, briefly, on
// vnode-3 while vnode-1 holds the only grant: both get only the fallback and
// wait in line; when vnode-1's fault expires its grant passes to vnode-2,
// and vnode-3's fault ends while it waits, so its pod is never evicted.
//
// Part 2, maintenance drains. Act 3 fails a GPU on vnode-4, whose rule says
// action: drain: the coordinator cordons it and evicts its Deployment's and
// StatefulSet's pods through the Eviction API, one StatefulSet pod at a
// time as its PodDisruptionBudget allows, while their controllers and
// kube-scheduler put them elsewhere; vnode-4 ends Drained. Act 4 has an
// operator drain vnode-6 with a 20s deadline, whose only pod's
// PodDisruptionBudget allows no disruption, and fails a GPU on vnode-5
// while vnode-6 holds the pool's only slot: vnode-5 waits in line;
// `selftaint drain --wait` follows vnode-6 to its deadline, where it is
// given back DrainBlocked naming the PDB, and vnode-5 gets the slot.
//
// Every fault expires by itself; after each part the demo prints what each
// node and pod went through, checks its claims against what it saw, and
// at the end cleans everything up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "selftaint-demo: %v\n", err)
		}
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	selftaint   string
	faultFor    time.Duration
	tolerateFor time.Duration
	keep        bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.selftaint, "selftaint", "bin/selftaint", "the selftaint binary to run (make demo builds it)")
	fs.DurationVar(&o.faultFor, "fault-for", 45*time.Second, "how long the fault on vnode-1 lasts before it expires by itself (vnode-2's lasts 30s longer, vnode-3's 15s)")
	fs.DurationVar(&o.tolerateFor, "tolerate-for", 20*time.Second, "tolerationSeconds of the pod that tolerates the taint for a while")
	fs.BoolVar(&o.keep, "keep", false, "after the drill, keep everything running until Ctrl-C (to look around with kubectl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if o.faultFor <= o.tolerateFor+5*time.Second {
		return fmt.Errorf("--fault-for (%s) must be at least 5s longer than --tolerate-for (%s), or the drill ends before the eviction it shows", o.faultFor, o.tolerateFor)
	}
	bin, err := filepath.Abs(o.selftaint)
	if err != nil {
		return err
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("selftaint binary %s: %w (make demo builds it; or pass --selftaint)", bin, err)
	}
	o.selftaint = bin
	d := &demo{opts: o, cast: newCast(o), log: &printer{out: stdout, start: time.Now()}}
	return d.run(ctx)
}
