// Command selftaint is the node agent's binary. Its subcommands turn flags and
// the config file into components and run them; this is the only package
// that exits the process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/selftaint/selftaint/agent/config"
)

const usage = `selftaint keeps taints on its own Kubernetes Node that follow the node's health.

Usage:
  selftaint agent [flags]   run the node agent (the DaemonSet's job)
  selftaint check [flags]   probe this machine once, no cluster needed, and show
                            the conditions and taints that would follow
  selftaint coordinator [flags]
                            hand out NoExecute grants under the fleet's budget and
                            keep the disruption guard (a leader-elected Deployment)
  selftaint virtual [flags] run simulated nodes (virtual-kubelet) with the same
                            pipeline, healthy unless a fault is injected
  selftaint explain NODE    which pods on NODE its taints (or --taint ones)
                            would evict, when, and what could still schedule
  selftaint fault inject|clear|list ...
                            inject, clear or list faults: Node annotations that
                            make a node's agent publish a condition until they expire
  selftaint drain NODE... --reason R [--wait] | --selector L --max-parallel N | --done NODE...
                            ask the coordinator to drain nodes (cordon, evict through
                            the Eviction API within its maintenance pool), follow, end
  selftaint drill FILE.yaml [--kubeconfig K] [--report R.json] [--junit J.xml]
                            run a drill: workloads, faults, NotReady nodes, drains and
                            coordinator failures on a timeline, judged against expectations
  selftaint gpu clear NODE (--gpu UUID ... | --all) [--wait]
                            ask the agent on NODE to forget the GPU failures it
                            keeps across restarts (once the GPU is reset or repaired)
  selftaint policy-params [--config FILE]
                            what the config lets the agent own, as the admission
                            policy's parameters (its agent.selftaint.io/owned-* annotations)
  selftaint version         print the version, revision and Go version

Run "selftaint <command> -h" for the command's flags. explain, fault, drain
and gpu take kubectl's --kubeconfig, --context, --cluster, --user,
--request-timeout and -n/--namespace (the coordinator's namespace), also
before the command. As kubectl-selftaint on $PATH, kubectl runs the binary as
"kubectl selftaint".
`

// errUsage marks an error already explained by a usage message.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = withRuntimeTuning(withProg(ctx, progName(os.Args[0])))
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code; the program's
// name (withProg) names it in usage and errors.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	prog := progOf(ctx)
	help := forProg(prog, usage)
	if len(args) == 0 {
		fmt.Fprint(stderr, help)
		return 2
	}
	args, err := hoistKubeFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n\n%s", prog, err, help)
		return 2
	}
	switch args[0] {
	case "agent":
		err = runAgent(ctx, args[1:], stderr)
	case "coordinator":
		err = runCoordinator(ctx, args[1:], stderr)
	case "virtual":
		err = runVirtual(ctx, args[1:], stderr)
	case "check":
		err = runCheck(ctx, args[1:], stdout, stderr)
	case "explain":
		err = runExplain(ctx, args[1:], stdout, stderr)
	case "fault":
		err = runFault(ctx, args[1:], stdout, stderr)
	case "drain":
		err = runDrain(ctx, args[1:], stdout, stderr)
	case "drill":
		err = runDrill(ctx, args[1:], stdout, stderr)
	case "gpu":
		err = runGPU(ctx, args[1:], stdout, stderr)
	case "version":
		err = runVersion(args[1:], stdout, stderr)
	case "policy-params":
		err = runPolicyParams(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, help)
		return 0
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", prog, args[0], help)
		return 2
	}
	var code *exitCodeError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return code.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, args[0], err)
		return 1
	}
}

// newLogger builds the process logger and routes client-go's klog output
// through it, so there is one log format.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
	klog.SetSlogLogger(logger)
	return logger, nil
}

// loggerAndConfig builds the process logger and loads the config file:
// the start of every long-running command.
func loggerAndConfig(stderr io.Writer, level, configPath string) (*slog.Logger, *config.Config, error) {
	logger, err := newLogger(stderr, level)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, nil, err
	}
	return logger, cfg, nil
}

// parseFlags parses args into fs, turning flag errors into errUsage (the
// flag package has already printed them).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		return errUsage
	}
	return nil
}
