package drill

// Result is the verdict on one expectation.
type Result struct {
	Name string `json:"name"`
	// Kind is the expectation's kind: ready, pdb, evicted, notEvicted,
	// noExecute, explain.
	Kind   string `json:"kind"`
	Passed bool   `json:"passed"`
	// Message says in one line what was expected and what was measured.
	Message  string   `json:"message"`
	Measured Measured `json:"measured"`
}

// Measured holds the figures behind a verdict; each kind fills its own.
type Measured struct{}
