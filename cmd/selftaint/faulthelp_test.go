package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/taints/faults"
)

// TestFaultHelpListsTheRegistry checks that `selftaint fault --help` and
// inject's --condition help list every probe of the registry with its
// default condition, and that a probe added to the registry appears there
// with no other edit.
func TestFaultHelpListsTheRegistry(t *testing.T) {
	code, stdout, _ := runCLI(t, "fault", "--help")
	if code != 0 {
		t.Fatalf("fault --help exit %d", code)
	}
	for _, p := range config.DefaultRegistry().Targets() {
		line := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(p.Name) + ` +` + regexp.QuoteMeta(string(p.Condition)) + `$`)
		if !line.MatchString(stdout) {
			t.Errorf("fault --help does not list probe %s with condition %s:\n%s", p.Name, p.Condition, stdout)
		}
	}
	_, _, stderr := runCLI(t, "fault", "inject", "--help")
	if want := "probe name (" + config.DefaultRegistry().ProbeNames() + ")"; !strings.Contains(stderr, want) {
		t.Errorf("fault inject --help does not say %q:\n%s", want, stderr)
	}

	reg := append(config.DefaultRegistry(), config.ProbeSection{Key: "fake",
		Probes: []config.ProbeTarget{{Name: "fake", Condition: "SelftaintFakeProblem"}}})
	if got := faultUsage(reg); !regexp.MustCompile(`(?m)^  fake +SelftaintFakeProblem$`).MatchString(got) {
		t.Errorf("faultUsage with a fake probe does not list it:\n%s", got)
	}
	if got := conditionFlagUsage(reg); !strings.Contains(got, "network, fake)") {
		t.Errorf("conditionFlagUsage with a fake probe = %q, want it named", got)
	}
}

// faultMessage reports whether a condition message is a fault's message
// msg behind its mark ("[fault.selftaint.io/<target>] msg").
func faultMessage(got, msg string) bool {
	_, marked := faults.MarkedBy(got)
	return marked && strings.HasSuffix(got, "] "+msg)
}
