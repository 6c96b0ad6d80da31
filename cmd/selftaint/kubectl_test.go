package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/selftaint/selftaint/agent/testcp"
)

func TestPluginProgName(t *testing.T) {
	tests := []struct{ argv0, want string }{
		{"selftaint", "selftaint"},
		{"/usr/local/bin/selftaint", "selftaint"},
		{"./bin/selftaint", "selftaint"},
		{"kubectl-selftaint", "kubectl selftaint"},
		{"/home/me/.local/bin/kubectl-selftaint", "kubectl selftaint"},
		{`C:\krew\bin\kubectl-selftaint.exe`, "kubectl selftaint"},
		{"/tmp/kubectl-selftaint-old", "selftaint"},
		{"/tmp/kubectl-selftaint.test", "selftaint"},
		{"/tmp/selftaint.test", "selftaint"},
	}
	for _, tt := range tests {
		argv0 := filepath.FromSlash(strings.ReplaceAll(tt.argv0, `\`, "/"))
		if got := progName(argv0); got != tt.want {
			t.Errorf("progName(%q) = %q, want %q", tt.argv0, got, tt.want)
		}
	}
}

func TestPluginForProg(t *testing.T) {
	tests := []struct {
		name, prog, in, want string
	}{
		{"standalone unchanged", progStandalone, "  selftaint explain NODE\n", "  selftaint explain NODE\n"},
		{"a command line", progPlugin, "Usage: selftaint explain NODE [flags]", "Usage: kubectl selftaint explain NODE [flags]"},
		{"every command", progPlugin, "selftaint fault inject; selftaint drain NODE; selftaint gpu clear; selftaint drill F; selftaint <command> -h",
			"kubectl selftaint fault inject; kubectl selftaint drain NODE; kubectl selftaint gpu clear; kubectl selftaint drill F; kubectl selftaint <command> -h"},
		{"a quoted command", progPlugin, `Run "selftaint help"`, `Run "kubectl selftaint help"`},
		{"the command at the end", progPlugin, "see selftaint version", "see kubectl selftaint version"},
		{"prose stays", progPlugin, "the coordinator uncordons it if selftaint cordoned it", "the coordinator uncordons it if selftaint cordoned it"},
		{"names stay", progPlugin, "annotation maintenance.selftaint.io/request and selftaint.io/drain-request", "annotation maintenance.selftaint.io/request and selftaint.io/drain-request"},
		{"a possessive stays", progPlugin, "selftaint's coordinator", "selftaint's coordinator"},
		{"a word that starts like a command stays", progPlugin, "selftaint checks nothing; selftaint drained", "selftaint checks nothing; selftaint drained"},
		{"a path stays", progPlugin, "bin/selftaint explain", "bin/selftaint explain"},
		{"the binary's name stays", progPlugin, "kubectl-selftaint explain", "kubectl-selftaint explain"},
		{"continuation lines move with the command lines", progPlugin,
			"  selftaint drain NODE --reason R\n                  [--wait]\n  short indent stays\n",
			"  kubectl selftaint drain NODE --reason R\n                          [--wait]\n  short indent stays\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forProg(tt.prog, tt.in); got != tt.want {
				t.Errorf("forProg(%q, %q)\n got %q\nwant %q", tt.prog, tt.in, got, tt.want)
			}
		})
	}
}

func TestPluginHoistKubeFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{"nothing before the command", []string{"explain", "n1", "-n", "ns"}, []string{"explain", "n1", "-n", "ns"}, ""},
		{"namespace before the command", []string{"-n", "ns", "explain", "n1"}, []string{"explain", "n1", "-n", "ns"}, ""},
		{"several, both forms", []string{"--context", "c", "--namespace=ns", "--kubeconfig=/k", "fault", "inject", "n1", "--condition", "memory"},
			[]string{"fault", "inject", "n1", "--condition", "memory", "--context", "c", "--namespace=ns", "--kubeconfig=/k"}, ""},
		{"single dash long", []string{"-context=c", "drain", "n1"}, []string{"drain", "n1", "-context=c"}, ""},
		{"attached shorthand value", []string{"-nns", "explain", "n1"}, []string{"explain", "n1", "-nns"}, ""},
		{"cluster, user, timeout", []string{"--cluster", "k", "--user", "u", "--request-timeout", "5s", "gpu", "clear", "n1", "--all"},
			[]string{"gpu", "clear", "n1", "--all", "--cluster", "k", "--user", "u", "--request-timeout", "5s"}, ""},
		{"before a --", []string{"-n", "ns", "explain", "--", "-odd-node"}, []string{"explain", "-n", "ns", "--", "-odd-node"}, ""},
		{"help is left for run", []string{"-h"}, []string{"-h"}, ""},
		{"a value that looks like a command", []string{"--context", "explain", "drain", "n1"}, []string{"drain", "n1", "--context", "explain"}, ""},
		{"not a kubectl flag", []string{"--reason", "r", "drain", "n1"}, nil, "flag --reason before the command"},
		{"a bool before the command", []string{"--wait", "drain"}, nil, "flag --wait before the command"},
		{"a flag without its value", []string{"explain", "n1", "--context"}, []string{"explain", "n1", "--context"}, ""},
		{"no value before the command", []string{"--context"}, nil, "flag --context needs a value"},
		{"no command", []string{"-n", "ns"}, nil, "no command"},
		{"a bare --", []string{"--", "explain"}, nil, "flag -- before the command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hoistKubeFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("hoistKubeFlags(%q) = %q, %v; want an error containing %q", tt.args, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("hoistKubeFlags(%q) = %q, %v; want %q", tt.args, got, err, tt.want)
			}
		})
	}
}

// TestPluginKubeFlags parses kubectl's flags the way every operator command
// does (addKubeFlags and parseInterspersed) and checks what clientcmd is
// told.
func TestPluginKubeFlags(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      kubeFlags
		wantPos   []string
		wantUsage string // a usage error, printed
	}{
		{"none", []string{"n1"}, kubeFlags{}, []string{"n1"}, ""},
		{"all, after the node", []string{"n1", "--kubeconfig", "/k", "--context=c", "--cluster", "k", "--user=u", "--request-timeout", "30s", "--namespace", "ns"},
			kubeFlags{kubeconfig: "/k", context: "c", cluster: "k", user: "u", requestTimeout: timeoutFlag{"30s"}, namespace: "ns"}, []string{"n1"}, ""},
		{"-n with a space", []string{"-n", "ns", "n1"}, kubeFlags{namespace: "ns"}, []string{"n1"}, ""},
		{"-n=", []string{"n1", "-n=ns"}, kubeFlags{namespace: "ns"}, []string{"n1"}, ""},
		{"-nVALUE as kubectl takes it", []string{"n1", "-nkube-system"}, kubeFlags{namespace: "kube-system"}, []string{"n1"}, ""},
		{"-nVALUE after -- is an argument", []string{"--", "-nkube-system"}, kubeFlags{}, []string{"-nkube-system"}, ""},
		{"timeout in seconds", []string{"n1", "--request-timeout=5"}, kubeFlags{requestTimeout: timeoutFlag{"5"}}, []string{"n1"}, ""},
		{"timeout 0", []string{"n1", "--request-timeout=0"}, kubeFlags{requestTimeout: timeoutFlag{"0"}}, []string{"n1"}, ""},
		{"bad timeout", []string{"n1", "--request-timeout=soon"}, kubeFlags{}, nil, "invalid value \"soon\" for flag -request-timeout"},
		{"negative timeout", []string{"n1", "--request-timeout=-1s"}, kubeFlags{}, nil, "invalid value \"-1s\""},
		{"a flag that is not kubectl's", []string{"n1", "--as=admin"}, kubeFlags{}, nil, "flag provided but not defined: -as"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			fs := flag.NewFlagSet("selftaint test", flag.ContinueOnError)
			fs.SetOutput(&stderr)
			k := addKubeFlags(fs, "the namespace")
			pos, err := parseInterspersed(fs, tt.args)
			if tt.wantUsage != "" {
				if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tt.wantUsage) {
					t.Fatalf("got error %v, stderr %q; want a usage error saying %q", err, stderr.String(), tt.wantUsage)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, stderr %q", err, stderr.String())
			}
			if *k != tt.want || !slices.Equal(pos, tt.wantPos) {
				t.Errorf("got %+v and arguments %q, want %+v and %q", *k, pos, tt.want, tt.wantPos)
			}
			o := k.overrides()
			if o.CurrentContext != tt.want.context || o.Context.Cluster != tt.want.cluster || o.Context.AuthInfo != tt.want.user || o.Timeout != tt.want.requestTimeout.s {
				t.Errorf("overrides %+v do not carry %+v", *o, tt.want)
			}
		})
	}
}

func TestPluginSelectedUser(t *testing.T) {
	raw := clientcmdapi.Config{
		CurrentContext: "a",
		Contexts:       map[string]*clientcmdapi.Context{"a": {AuthInfo: "alice"}, "b": {AuthInfo: "bob"}},
	}
	tests := []struct {
		name string
		raw  clientcmdapi.Config
		o    clientcmd.ConfigOverrides
		want string
	}{
		{"the current context's", raw, clientcmd.ConfigOverrides{}, "alice"},
		{"--context's", raw, clientcmd.ConfigOverrides{CurrentContext: "b"}, "bob"},
		{"--user wins", raw, clientcmd.ConfigOverrides{CurrentContext: "b", Context: clientcmdapi.Context{AuthInfo: "carol"}}, "carol"},
		{"an unknown context", raw, clientcmd.ConfigOverrides{CurrentContext: "x"}, ""},
		{"no kubeconfig", clientcmdapi.Config{}, clientcmd.ConfigOverrides{}, ""},
	}
	for _, tt := range tests {
		if got := selectedUser(tt.raw, &tt.o); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestPluginUsage runs commands as kubectl-selftaint would be run: usage and
// errors name "kubectl selftaint".
func TestPluginUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string // in stdout or stderr
		not      string
	}{
		{"no command", nil, 2, "  kubectl selftaint explain NODE", "\n  selftaint explain"},
		{"help", []string{"help"}, 0, `Run "kubectl selftaint <command> -h"`, ""},
		{"unknown command", []string{"frobnicate"}, 2, `kubectl selftaint: unknown command "frobnicate"`, ""},
		{"a flag before the command that is not kubectl's", []string{"--reason", "r", "drain"}, 2, "kubectl selftaint: flag --reason before the command", ""},
		{"explain without a node", []string{"explain"}, 2, "kubectl selftaint explain: missing NODE\nUsage: kubectl selftaint explain NODE", ""},
		{"explain with a namespace but no node", []string{"-n", "ns", "explain"}, 2, "kubectl selftaint explain: missing NODE", ""},
		{"explain's flags", []string{"explain", "-h"}, 0, "-context string", ""},
		{"fault", []string{"fault"}, 2, "  kubectl selftaint fault inject NODE", ""},
		{"fault inject's flag set", []string{"fault", "inject", "--nope"}, 2, "Usage of kubectl selftaint fault inject:", ""},
		{"drain", []string{"drain", "-h"}, 0, "  kubectl selftaint drain NODE... --reason R", "if kubectl selftaint cordoned"},
		{"drain without nodes", []string{"drain", "--reason", "r"}, 2, "kubectl selftaint drain: no nodes", ""},
		{"gpu", []string{"gpu"}, 2, "  kubectl selftaint gpu clear NODE", ""},
		{"a command's error", []string{"explain", "n1", "--output=yaml"}, 1, "kubectl selftaint explain: --output must be table or json", ""},
		{"a bad request timeout", []string{"explain", "n1", "--request-timeout=soon"}, 2, "invalid value \"soon\" for flag -request-timeout", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(withProg(t.Context(), progPlugin), tt.args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != tt.wantCode || !strings.Contains(out, tt.want) || (tt.not != "" && strings.Contains(out, tt.not)) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d, saying %q (and not %q)", code, out, tt.wantCode, tt.want, tt.not)
			}
		})
	}
}

// pluginKubeconfig writes a kubeconfig of two contexts over the control
// plane's: "wrong", the current one, at a port nothing listens on, and
// "right" at cp; the cluster "live" is cp's, and the user "nobody" has a
// token the API server does not know.
func pluginKubeconfig(t *testing.T, cp *testcp.ControlPlane) string {
	t.Helper()
	base, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cur := base.Contexts[base.CurrentContext]
	live, admin := base.Clusters[cur.Cluster], base.AuthInfos[cur.AuthInfo]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["live"] = live
	// Port 1 (tcpmux): only root could listen there, so the connection is refused.
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: live.CertificateAuthorityData}
	cfg.AuthInfos["admin"] = admin
	cfg.AuthInfos["nobody"] = &clientcmdapi.AuthInfo{Token: "not-a-token-the-server-knows"}
	cfg.Contexts["wrong"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "admin"}
	cfg.Contexts["right"] = &clientcmdapi.Context{Cluster: "live", AuthInfo: "admin"}
	cfg.CurrentContext = "wrong"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// pluginNoExecuteConfig is an agents' config with a NoExecute rule, so
// explain says which coordinator namespace it read ("(namespace NS)").
const pluginNoExecuteConfig = "rules:\n- condition: SelftaintMemoryPressure\n  status: \"True\"\n  taint: {key: selftaint.io/memory-pressure, effect: NoExecute}\n  fallback: NoSchedule\n"

// TestPluginKubeFlagsSelect runs explain in process against the real API
// server with a kubeconfig whose current context is wrong: --context,
// --cluster and --user select as kubectl's do, -n names the coordinator's
// namespace, and $KUBECONFIG is read when --kubeconfig is not given.
func TestPluginKubeFlagsSelect(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	const node = "plugin-select"
	cp.CreateNode(t, node, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	})
	kc := pluginKubeconfig(t, cp)
	cfg := "--config=" + writeFile(t, pluginNoExecuteConfig)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"the current context is wrong", []string{"explain", node, "--kubeconfig", kc, cfg}, 1, []string{"127.0.0.1:1"}},
		{"--context picks the right one", []string{"explain", node, "--kubeconfig", kc, "--context", "right", cfg}, 0,
			[]string{"NoExecute on " + node, "(namespace selftaint)"}},
		{"--cluster over the current context", []string{"explain", node, "--kubeconfig=" + kc, "--cluster=live", cfg}, 0, []string{"NoExecute on " + node}},
		{"--user over --context", []string{"explain", node, "--kubeconfig", kc, "--context", "right", "--user", "nobody", cfg}, 1, []string{"Unauthorized"}},
		{"an unknown context", []string{"explain", node, "--kubeconfig", kc, "--context", "nope", cfg}, 1, []string{`context "nope" does not exist`}},
		{"-n is the coordinator's namespace", []string{"explain", node, "--kubeconfig", kc, "--context", "right", "-n", "plugin-ns", cfg}, 0,
			[]string{"(namespace plugin-ns)"}},
		{"-nVALUE", []string{"explain", node, "--kubeconfig", kc, "--context", "right", "-nplugin-ns", cfg}, 0, []string{"(namespace plugin-ns)"}},
		{"flags before the command", []string{"--context", "right", "-n", "plugin-ns", "--kubeconfig", kc, "explain", node, cfg}, 0,
			[]string{"(namespace plugin-ns)"}},
		{"fault list takes them too", []string{"fault", "list", node, "--kubeconfig", kc, "--context", "right"}, 0, []string{"no faults"}},
		{"fault list on the wrong context", []string{"fault", "list", node, "--kubeconfig", kc}, 1, []string{"127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestKubectlPlugin builds the binary, puts it on $PATH as
// kubectl-selftaint, and runs it through the real kubectl against the real
// API server, with a kubeconfig whose current context is wrong.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	testcp.SkipIfShort(t, "builds the binary and runs kubectl")
	kubectl := testcp.KubePath(t, "kubectl")
	cp := shared.Get(t)
	const node = "plugin-kubectl"
	cp.CreateNode(t, node, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	})
	kc := pluginKubeconfig(t, cp)
	cfg := "--config=" + writeFile(t, pluginNoExecuteConfig)

	dir := t.TempDir()
	plugin := filepath.Join(dir, pluginExecutable)
	if err := os.Symlink(buildStamped(t), plugin); err != nil {
		t.Fatal(err)
	}
	// $PATH holds only the plugin, so no plugin of the machine's is listed
	// or warned about; HOME has no ~/.kube/config.
	env := []string{"PATH=" + dir, "HOME=" + t.TempDir(), "KUBECONFIG=" + kc}
	kubectlRun := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(kubectl, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), out.String()
		}
		t.Fatalf("running kubectl %q: %v", args, err)
		return 0, ""
	}

	t.Run("plugin list", func(t *testing.T) {
		code, out := kubectlRun(t, "plugin", "list")
		if code != 0 || !strings.Contains(out, plugin) || strings.Contains(out, "warning") {
			t.Errorf("kubectl plugin list: exit %d, output:\n%s\nwant %s listed without warnings", code, out, plugin)
		}
	})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"usage names kubectl selftaint", []string{"selftaint"}, 2, []string{"  kubectl selftaint explain NODE", `Run "kubectl selftaint <command> -h"`}},
		{"the current context is wrong", []string{"selftaint", "explain", node, cfg}, 1, []string{"kubectl selftaint explain: ", "127.0.0.1:1"}},
		{"--context picks the right one", []string{"selftaint", "explain", node, "--context", "right", cfg}, 0,
			[]string{"NoExecute on " + node, "(namespace selftaint)"}},
		{"--kubeconfig, --context and -n before the command", []string{"selftaint", "--kubeconfig", kc, "--context=right", "-n", "plugin-ns", "explain", node, cfg}, 0,
			[]string{"NoExecute on " + node, "(namespace plugin-ns)"}},
		{"--user", []string{"selftaint", "explain", node, "--context", "right", "--user", "nobody", cfg}, 1, []string{"Unauthorized"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := kubectlRun(t, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("kubectl %q: exit %d, want %d; output:\n%s", tt.args, code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl %q does not say %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
}
