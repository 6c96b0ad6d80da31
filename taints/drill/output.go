package drill

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ExitCode is the exit status for the report: ExitNotRun when the drill
// could not run to its end (whatever its expectations say), else
// ExitBreached when an expectation was breached, else ExitPassed.
func (r *Report) ExitCode() int {
	switch {
	case r.Error != "":
		return ExitNotRun
	case slices.ContainsFunc(r.Expectations, func(res Result) bool { return !res.Passed }):
		return ExitBreached
	}
	return ExitPassed
}

// Table is the closing table `selftaint drill` prints: one row per
// expectation (PASS or FAIL, its name, its measured values in short),
// then the message of each breached one, each step that failed, and a
// footer with the verdict and the wall time.
func Table(r *Report) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tEXPECTATION\tMEASURED")
	breached := 0
	for _, res := range r.Expectations {
		verdict := "PASS"
		if !res.Passed {
			verdict = "FAIL"
			breached++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", verdict, res.Name, shortMeasured(res.Measured))
	}
	_ = tw.Flush() // a strings.Builder does not fail
	for _, res := range r.Expectations {
		if !res.Passed {
			fmt.Fprintf(&b, "FAIL %s: %s\n", res.Name, res.Message)
		}
	}
	for _, st := range r.Steps {
		if st.Error != "" {
			fmt.Fprintf(&b, "step %s (%s) failed at %.1fs: %s\n", st.Name, st.Kind, st.AtSeconds, st.Error)
		}
	}
	if r.Cleanup.Error != "" {
		fmt.Fprintf(&b, "cleanup failed: %s\n", r.Cleanup.Error)
	}
	fmt.Fprintf(&b, "%s; wall time %s", verdictLine(r, breached), shortDuration(wall(r.DurationSeconds)))
	if r.ControlPlaneStartSeconds > 0 {
		fmt.Fprintf(&b, " (control plane started in %s)", shortDuration(wall(r.ControlPlaneStartSeconds)))
	}
	b.WriteString("\n")
	return b.String()
}

func verdictLine(r *Report, breached int) string {
	n := len(r.Expectations)
	switch {
	case r.Error != "":
		return fmt.Sprintf("NOT RUN TO ITS END: %s (%d of %d expectations breached or undecided)", r.Error, breached, n)
	case r.Passed:
		return fmt.Sprintf("PASSED: %d of %d expectations held", n-breached, n)
	}
	return fmt.Sprintf("FAILED: %d of %d expectations breached", breached, n)
}

func wall(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond)
}

// shortMeasured is a result's figures in a few words; each kind fills
// its own fields, so the set ones say which.
func shortMeasured(m Measured) string {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	switch {
	case m.ReadyAfterSeconds != nil:
		add("back in %.1fs", *m.ReadyAfterSeconds)
	case m.Ready != nil && m.Desired != nil:
		add("not back (%d/%d ready)", *m.Ready, *m.Desired)
	}
	if m.RescheduleP50Seconds != nil && m.RescheduleP99Seconds != nil && m.Rescheduled != nil {
		add("reschedule p50 %.1fs p99 %.1fs (%d %s)", *m.RescheduleP50Seconds, *m.RescheduleP99Seconds, *m.Rescheduled, plural(*m.Rescheduled, "pod", "pods"))
	}
	if m.ViolationSeconds != nil && m.Violations != nil {
		add("PDB violated %.1fs (%d %s)", *m.ViolationSeconds, *m.Violations, plural(*m.Violations, "time", "times"))
	}
	if m.MinHealthy != nil {
		add("fewest healthy %d", *m.MinHealthy)
	}
	evictMeasured(m, add)
	if m.MaxNoExecuteNodes != nil {
		add("max %d NoExecute %s", *m.MaxNoExecuteNodes, plural(*m.MaxNoExecuteNodes, "node", "nodes"))
	}
	if m.Predictions != nil && m.Held != nil {
		add("%d/%d predictions held", *m.Held, *m.Predictions)
	}
	guardMeasured(m, add)
	if m.MaxMaintenanceNodes != nil {
		add("max %d %s in maintenance", *m.MaxMaintenanceNodes, plural(*m.MaxMaintenanceNodes, "node", "nodes"))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// evictMeasured adds an evicted or notEvicted verdict's figures in short.
func evictMeasured(m Measured, add func(format string, args ...any)) {
	if m.Evictions == nil || m.Matched == nil {
		return
	}
	add("%d of %d evicted", *m.Evictions, *m.Matched)
	// With a reason asked, Evictions counts that reason only.
	deleted := deletedCount(m.Pods)
	if o := len(m.Pods) - deleted - *m.Evictions; o > 0 {
		add("%d evicted otherwise", o)
	}
	if deleted > 0 {
		add("%d deleted without eviction", deleted)
	}
}

// guardMeasured adds a guard verdict's figures in short.
func guardMeasured(m Measured, add func(format string, args ...any)) {
	switch {
	case m.FirstTrip != nil:
		f := m.FirstTrip
		add("tripped at %.1fs (%s %s)", f.AtSeconds, f.Condition, scopeName(f.Scope))
		if m.TrippedSeconds != nil {
			add("%.1fs in all", *m.TrippedSeconds)
		}
	case m.GuardVersions != nil:
		add("never tripped (%d %s)", *m.GuardVersions, plural(*m.GuardVersions, "version", "versions"))
	}
	if m.UnreadableVersions != nil && *m.UnreadableVersions > 0 {
		add("%d unreadable", *m.UnreadableVersions)
	}
}

// WriteJSON writes the report as JSON (its schema: report.schema.json
// beside this file, ReportSchema its version), indented, lists never
// null.
func WriteJSON(w io.Writer, r *Report) error {
	out := *r
	if out.Schema == "" {
		out.Schema = ReportSchema
	}
	if out.Steps == nil {
		out.Steps = []StepReport{}
	}
	if out.Expectations == nil {
		out.Expectations = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&out); err != nil {
		return fmt.Errorf("writing the drill report: %w", err)
	}
	return nil
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func (s *junitSuite) count() {
	for _, c := range s.Cases {
		s.Tests++
		if c.Failure != nil {
			s.Failures++
		}
		if c.Error != nil {
			s.Errors++
		}
	}
}

// stepCases are the steps' testcases, and whether one failed.
func stepCases(suite string, steps []StepReport) ([]junitCase, bool) {
	var cases []junitCase
	failed := false
	for _, st := range steps {
		c := junitCase{Classname: suite + ".steps", Name: fmt.Sprintf("step %s (%s)", st.Name, st.Kind), Time: junitTime(st.DurationSeconds), SystemOut: stepOut(st)}
		if st.Error != "" {
			failed = true
			c.Error = &junitProblem{Message: st.Error, Type: "StepFailed", Text: st.Error}
		}
		cases = append(cases, c)
	}
	return cases, failed
}

func junitTime(s float64) string { return fmt.Sprintf("%.3f", s) }

// junitTimestamp is a testsuite's timestamp: RFC 3339 in UTC, its zone
// written ("2026-11-27T07:59:40Z"), so that a JUnit reader in another
// zone reads the same instant.
func junitTimestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// expectationOut is an expectation's system-out, passed or not: what was
// judged in words (its verdict and message, as the table says it), its
// figures in short, then the same figures as JSON for tools.
func expectationOut(res Result) (string, error) {
	measured, err := json.Marshal(res.Measured)
	if err != nil {
		return "", err
	}
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s: %s\nmeasured: %s\nmeasured (JSON): %s\n", verdict, res.Name, res.Message, shortMeasured(res.Measured), measured), nil
}

// stepOut is a step's system-out: when it ran, for how long, on which
// nodes.
func stepOut(st StepReport) string {
	out := fmt.Sprintf("step %s (%s) started at %.1fs from t=0 and took %.1fs", st.Name, st.Kind, st.AtSeconds, st.DurationSeconds)
	if len(st.Nodes) > 0 {
		out += fmt.Sprintf(" on %d %s: %s", len(st.Nodes), plural(len(st.Nodes), "node", "nodes"), strings.Join(st.Nodes, ", "))
	}
	if st.Error != "" {
		out += "; failed: " + st.Error
	}
	return out + "\n"
}

// WriteJUnit writes the report as JUnit XML: one testsuite named after
// the drill (its timestamp RFC 3339 in UTC), a testcase per step (an
// <error> when it failed; when and where it ran in system-out), per
// expectation (a <failure> when breached; in system-out, passed or not,
// its verdict and message in words, its figures in short and as JSON),
// for the cleanup when reported, and one for the drill
// itself with an <error> when it could not run to its end and no step
// says why.
func WriteJUnit(w io.Writer, r *Report) error {
	suite := junitSuite{Name: r.Drill, Time: junitTime(r.DurationSeconds)}
	if suite.Name == "" {
		suite.Name = "drill"
	}
	if !r.Started.IsZero() {
		suite.Timestamp = junitTimestamp(r.Started)
	}
	steps, stepFailed := stepCases(suite.Name, r.Steps)
	suite.Cases = steps
	for _, res := range r.Expectations {
		out, err := expectationOut(res)
		if err != nil {
			return fmt.Errorf("writing the JUnit file: %w", err)
		}
		c := junitCase{Classname: suite.Name + ".expect", Name: res.Name, Time: junitTime(0), SystemOut: out}
		if !res.Passed {
			c.Failure = &junitProblem{Message: res.Message, Type: res.Kind, Text: res.Message}
		}
		suite.Cases = append(suite.Cases, c)
	}
	if r.Cleanup.Done || r.Cleanup.Error != "" {
		c := junitCase{Classname: suite.Name, Name: "cleanup", Time: junitTime(0), SystemOut: strings.Join(r.Cleanup.Removed, "\n")}
		if r.Cleanup.Error != "" {
			c.Error = &junitProblem{Message: r.Cleanup.Error, Type: "CleanupFailed", Text: r.Cleanup.Error}
		}
		suite.Cases = append(suite.Cases, c)
	}
	if r.Error != "" && !stepFailed {
		suite.Cases = append(suite.Cases, junitCase{Classname: suite.Name, Name: "run", Time: junitTime(r.DurationSeconds),
			Error: &junitProblem{Message: r.Error, Type: "NotRun", Text: r.Error}})
	}
	suite.count()
	doc := junitSuites{Name: "selftaint drill", Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors,
		Time: suite.Time, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("writing the JUnit file: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("writing the JUnit file: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("writing the JUnit file: %w", err)
	}
	return nil
}
