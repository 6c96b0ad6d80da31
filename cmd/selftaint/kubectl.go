package main

// The binary as a kubectl plugin: kubectl runs `kubectl selftaint ARGS` as
// the executable kubectl-selftaint on $PATH with ARGS, so the program's name
// is read from os.Args[0], usage and errors follow it, and the operator
// commands take kubectl's global flags (kubeFlags).

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/selftaint/selftaint/agent/config"
)

const (
	// pluginExecutable is the name kubectl finds the plugin by on $PATH.
	pluginExecutable = "kubectl-selftaint"
	// progStandalone and progPlugin are how usage names the program.
	progStandalone = "selftaint"
	progPlugin     = "kubectl selftaint"
)

// progName is how the program is named for argv0, os.Args[0]: "kubectl
// selftaint" when run as kubectl-selftaint (kubectl execs the plugin by its
// path; on Windows with .exe), else "selftaint".
func progName(argv0 string) string {
	base := filepath.Base(argv0)
	if strings.EqualFold(strings.TrimSuffix(strings.ToLower(base), ".exe"), pluginExecutable) {
		return progPlugin
	}
	return progStandalone
}

// progKey is the context key of the program's name.
type progKey struct{}

// withProg records the program's name for the commands run under ctx.
func withProg(ctx context.Context, prog string) context.Context {
	return context.WithValue(ctx, progKey{}, prog)
}

// progOf is the program's name recorded in ctx, "selftaint" if none.
func progOf(ctx context.Context) string {
	if p, ok := ctx.Value(progKey{}).(string); ok && p != "" {
		return p
	}
	return progStandalone
}

// commandWords are the commands a usage text may name as "selftaint CMD".
const commandWords = `agent|check|coordinator|virtual|explain|fault|drain|gpu|drill|policy-params|version|help|<command>`

// forProg rewrites the command lines in a usage or error text,
// "selftaint explain ...", for prog ("kubectl selftaint explain ...").
// Only "selftaint" followed by a command's name is rewritten: prose about
// selftaint ("if selftaint cordoned it") and names like selftaint.io stay.
// The lines that continue a command line's columns (indented by 10 spaces
// or more) move right as far as the command lines grew, so they stay in
// line.
func forProg(prog, text string) string {
	if prog == progStandalone {
		return text
	}
	re := regexp.MustCompile(`(^|[^\w./-])selftaint( (?:` + commandWords + `)(?:[^\w-]|$))`)
	text = re.ReplaceAllString(text, "${1}"+prog+"${2}")
	shift := strings.Repeat(" ", max(0, len(prog)-len(progStandalone)))
	continued := regexp.MustCompile(`(?m)^( {10,}\S)`)
	return continued.ReplaceAllString(text, shift+"${1}")
}

// kubeFlags are kubectl's global flags, as the operator commands (explain,
// fault, drain, gpu, drill) take them: --kubeconfig, --context, --cluster,
// --user, --request-timeout, and -n/--namespace. The names and meanings are
// k8s.io/cli-runtime's genericclioptions.ConfigFlags', bound to Go's flag
// package, and they are applied as clientcmd.ConfigOverrides, as kubectl
// applies them.
type kubeFlags struct {
	kubeconfig string
	context    string
	cluster    string
	user       string
	// namespace is -n/--namespace as given, "" when not: what it names is
	// the command's (the coordinator's namespace for explain and fault). The
	// kubeconfig context's namespace is not used for it: that is where the
	// operator's workloads live, not selftaint's coordinator.
	namespace      string
	requestTimeout timeoutFlag
}

// addKubeFlags registers kubectl's global flags on fs; namespaceUsage says
// what -n/--namespace means for the command.
func addKubeFlags(fs *flag.FlagSet, namespaceUsage string) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	fs.StringVar(&k.context, "context", "", "the kubeconfig context to use (default its current-context)")
	fs.StringVar(&k.cluster, "cluster", "", "the kubeconfig cluster to use (default the context's)")
	fs.StringVar(&k.user, "user", "", "the kubeconfig user to use (default the context's)")
	fs.Var(&k.requestTimeout, "request-timeout", "how long one API request may take before it is given up: a `duration` such as 30s or 1m, or whole seconds; 0 means no limit (default 0)")
	fs.StringVar(&k.namespace, "namespace", "", namespaceUsage)
	fs.StringVar(&k.namespace, "n", "", "short for --namespace")
	return k
}

// coordinatorNamespaceUsage is -n/--namespace's help where it names the
// coordinator's namespace.
const coordinatorNamespaceUsage = "the coordinator's namespace, where its grant and slot Leases and guard are read (default: the config's coordinator.namespace, else " + config.DefaultCoordinatorNamespace + "; not the kubeconfig context's namespace)"

// clusterScopedNamespaceUsage is -n/--namespace's help where the command
// reads and writes nothing namespaced that one could choose.
const clusterScopedNamespaceUsage = "accepted as kubectl takes it, and unused: this command works on Nodes, which have no namespace"

// coordinatorNamespace is the coordinator's namespace: -n/--namespace, else
// cfg's coordinator.namespace, else the default.
func (k *kubeFlags) coordinatorNamespace(cfg *config.Config) string {
	if k.namespace != "" {
		return k.namespace
	}
	return cfg.Coordinator.NamespaceOr("")
}

// kubeFlagNames are the flags addKubeFlags registers; each takes a value.
func kubeFlagNames() []string {
	return []string{"kubeconfig", "context", "cluster", "user", "request-timeout", "namespace", "n"}
}

// timeoutFlag is --request-timeout: checked as clientcmd checks it
// (integer seconds or a duration; here never negative), kept as given for
// ConfigOverrides.
type timeoutFlag struct{ s string }

func (t *timeoutFlag) String() string { return t.s }

func (t *timeoutFlag) Set(v string) error {
	if d, err := clientcmd.ParseTimeout(v); err != nil || d < 0 {
		return fmt.Errorf("want whole seconds or a duration (1s, 2m, 3h), not negative, not %q", v)
	}
	t.s = v
	return nil
}

// overrides are the flags as clientcmd applies them over the kubeconfig.
func (k *kubeFlags) overrides() *clientcmd.ConfigOverrides {
	return &clientcmd.ConfigOverrides{
		CurrentContext: k.context,
		Context:        clientcmdapi.Context{Cluster: k.cluster, AuthInfo: k.user},
		Timeout:        k.requestTimeout.s,
	}
}

// clientConfig finds credentials the way kubectl does: --kubeconfig, else
// $KUBECONFIG (a list of files, merged), else ~/.kube/config, else the
// in-cluster config; then --context, --cluster, --user and
// --request-timeout over them.
func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, k.overrides())
}

// restConfig is the REST config of clientConfig, with userAgent.
func (k *kubeFlags) restConfig(userAgent string) (*rest.Config, error) {
	rc, err := k.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	rc.UserAgent = userAgent
	return rc, nil
}

// contextUser is the kubeconfig's name for the user the flags select, ""
// if there is none (or no kubeconfig).
func (k *kubeFlags) contextUser() string {
	raw, err := k.clientConfig().RawConfig()
	if err != nil {
		return ""
	}
	return selectedUser(raw, k.overrides())
}

// selectedUser is the kubeconfig user raw and the overrides select: --user,
// else the user of --context, else of the current context; "" if none.
func selectedUser(raw clientcmdapi.Config, o *clientcmd.ConfigOverrides) string {
	if o.Context.AuthInfo != "" {
		return o.Context.AuthInfo
	}
	name := raw.CurrentContext
	if o.CurrentContext != "" {
		name = o.CurrentContext
	}
	if c := raw.Contexts[name]; c != nil {
		return c.AuthInfo
	}
	return ""
}

// hoistKubeFlags moves kubectl's global flags that come before the command
// to after it: kubectl passes the words after "kubectl selftaint" on as
// they are, so `kubectl selftaint -n ns explain NODE` reaches the binary as
// [-n ns explain NODE], which becomes [explain NODE -n ns] (before a "--",
// after which every word is an argument). A flag before the command that
// is none of kubectl's is an error: only commands take flags. -h and
// --help are left for run.
func hoistKubeFlags(args []string) ([]string, error) {
	var lead []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && !isHelp(args[i]) {
		n, err := kubeFlagWords(args[i:])
		if err != nil {
			return nil, err
		}
		lead, i = append(lead, args[i:i+n]...), i+n
	}
	if len(lead) == 0 {
		return args, nil
	}
	rest := args[i:]
	if len(rest) == 0 {
		return nil, fmt.Errorf("flags %v but no command", lead)
	}
	at := len(rest)
	for j, a := range rest {
		if a == "--" {
			at = j
			break
		}
	}
	out := make([]string, 0, len(args))
	out = append(out, rest[:at]...)
	out = append(out, lead...)
	return append(out, rest[at:]...), nil
}

// kubeFlagWords is how many words of args (args[0] a flag) kubectl's
// global flag args[0] takes: 1 for --name=value, 2 for --name value.
func kubeFlagWords(args []string) (int, error) {
	name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
	known := false
	for _, k := range kubeFlagNames() {
		known = known || name == k
	}
	switch {
	case !known && len(args[0]) > 2 && strings.HasPrefix(args[0], "-n") && args[0][2] != '-':
		return 1, nil // -nVALUE, split by the command's parse (splitShorthand)
	case !known || strings.HasPrefix(args[0], "---"):
		return 0, fmt.Errorf("flag %s before the command: only kubectl's global flags (%s) may come before it", args[0], strings.Join(kubeFlagNames(), ", "))
	case hasValue:
		return 1, nil
	case len(args) < 2:
		return 0, fmt.Errorf("flag %s needs a value", args[0])
	}
	return 2, nil
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help"
}

// splitShorthand turns kubectl's -nVALUE (pflag's shorthand with its value
// attached) into -n=VALUE for Go's flag package, for each one-letter flag
// of fs that takes a value, where -nVALUE is no flag of its own. Words
// after "--" are left alone.
func splitShorthand(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		out = append(out, shorthandWord(fs, a))
	}
	return out
}

// shorthandWord is one word of splitShorthand.
func shorthandWord(fs *flag.FlagSet, a string) string {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a[:2], "=") {
		return a
	}
	short := fs.Lookup(a[1:2])
	if short == nil || fs.Lookup(strings.SplitN(a[1:], "=", 2)[0]) != nil {
		return a
	}
	if b, ok := short.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return a
	}
	return a[:2] + "=" + a[2:]
}

// existing reports whether the flags name a cluster: --kubeconfig,
// --context, --cluster or --user. A drill runs its own control plane
// unless they do.
func (k *kubeFlags) existing() bool {
	return k.kubeconfig != "" || k.context != "" || k.cluster != "" || k.user != ""
}

// writeSelected writes to path a kubeconfig holding only the context,
// cluster and user the flags select, with certificates and keys embedded,
// so that processes given --kubeconfig=path alone reach the same cluster as
// the same user.
func (k *kubeFlags) writeSelected(path string) error {
	raw, err := k.clientConfig().RawConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	o := k.overrides()
	name := raw.CurrentContext
	if o.CurrentContext != "" {
		name = o.CurrentContext
	}
	c := raw.Contexts[name]
	if c == nil {
		return fmt.Errorf("loading kubeconfig: context %q not found", name)
	}
	selected := *c
	if o.Context.Cluster != "" {
		selected.Cluster = o.Context.Cluster
	}
	if o.Context.AuthInfo != "" {
		selected.AuthInfo = o.Context.AuthInfo
	}
	raw.Contexts[name], raw.CurrentContext = &selected, name
	if err := clientcmdapi.MinifyConfig(&raw); err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(&raw); err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(raw, path); err != nil {
		return fmt.Errorf("writing the drill's kubeconfig: %w", err)
	}
	return nil
}
