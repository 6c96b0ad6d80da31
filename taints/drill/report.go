package drill

import "time"

// ReportSchema names the JSON report's schema version; its fields are
// documented in the README ("The drill report") and by Report's fields.
const ReportSchema = "selftaint.io/drill-report/v1"

// Exit statuses of `selftaint drill`.
const (
	ExitPassed   = 0 // every expectation held
	ExitBreached = 1 // an expectation was breached (or undecided at the end)
	ExitBadFile  = 2 // the scenario file (or a flag) is wrong: nothing ran
	ExitNotRun   = 3 // the drill could not run to its end (control plane, API errors, a failed step, interrupted)
)

// Report is a drill's outcome: what `--report FILE.json` writes, and what
// the closing table and the JUnit file are made from.
type Report struct {
	Schema string `json:"schema"`
	Drill  string `json:"drill"`
	File   string `json:"file"`
	// Cluster is "embedded" or "existing".
	Cluster  string    `json:"cluster"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// DurationSeconds is Finished - Started, setup and cleanup included.
	DurationSeconds float64 `json:"durationSeconds"`
	// ControlPlaneStartSeconds is how long the embedded control plane took
	// to start (0 with an existing cluster).
	ControlPlaneStartSeconds float64 `json:"controlPlaneStartSeconds,omitempty"`
	// Passed: every expectation held and the drill ran to its end.
	Passed bool `json:"passed"`
	// Error is why the drill could not run to its end (empty if it did).
	Error        string       `json:"error,omitempty"`
	Steps        []StepReport `json:"steps"`
	Expectations []Result     `json:"expectations"`
	Cleanup      Cleanup      `json:"cleanup"`
}

// StepReport is one step as run.
type StepReport struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// AtSeconds is when it started, from t=0; DurationSeconds how long its
	// action took (a wait: until met).
	AtSeconds       float64  `json:"atSeconds"`
	DurationSeconds float64  `json:"durationSeconds"`
	Nodes           []string `json:"nodes,omitempty"`
	Error           string   `json:"error,omitempty"`
}

// Cleanup says what the drill removed when it ended.
type Cleanup struct {
	// Done: everything the drill created is gone (or, embedded, the
	// control plane is stopped and its files removed).
	Done    bool     `json:"done"`
	Removed []string `json:"removed,omitempty"`
	Error   string   `json:"error,omitempty"`
}
