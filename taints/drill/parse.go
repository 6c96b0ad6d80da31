package drill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	yaml2 "go.yaml.in/yaml/v2"

	"github.com/selftaint/selftaint/probes/strict"
)

// FieldErr is one thing wrong in a scenario file, at a field path such as
// "steps[1].fault" or "cluster.pools[0].labels[gpu]" (empty for the whole
// file), on a line of the file (0 when not known).
type FieldErr struct {
	Path string `json:"path,omitempty"`
	Line int    `json:"line,omitempty"`
	Msg  string `json:"message"`
}

func (e FieldErr) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// FileError is a scenario file that cannot be run: every FieldErr found.
// `selftaint drill` exits ExitBadFile on it, having run nothing.
type FileError struct {
	File string
	Errs []FieldErr
}

// Error names the file and each field error with its line, as compilers
// do ("drill.yaml:12: steps[0].fault.for: ..."): one error on one line;
// several on a line each, after a count.
func (e *FileError) Error() string {
	file := e.File
	if file == "" {
		file = "drill"
	}
	at := func(fe FieldErr) string {
		if fe.Line > 0 {
			return fmt.Sprintf("%s:%d: %s", file, fe.Line, fe.Error())
		}
		return file + ": " + fe.Error()
	}
	if len(e.Errs) == 1 {
		return at(e.Errs[0])
	}
	lines := make([]string, 0, len(e.Errs)+1)
	lines = append(lines, fmt.Sprintf("%s: %d errors:", file, len(e.Errs)))
	for _, fe := range e.Errs {
		lines = append(lines, "  "+at(fe))
	}
	return strings.Join(lines, "\n")
}

// ConfigError is the FileError for a cluster.config the agent's config
// parser refused. The check itself is the runner's (agent/config imports
// taints, so taints/drill cannot import it); this keeps its report and
// exit status those of every other bad field.
func ConfigError(file string, err error) *FileError {
	return &FileError{File: file, Errs: []FieldErr{{Path: "cluster.config", Msg: err.Error()}}}
}

// Load reads and parses the scenario file at path (see Parse, which runs
// checks), and also checks that each workloads[i].file (relative to the
// scenario's directory) can be read and holds Kubernetes objects.
func Load(path string, checks ...func(*Scenario) []FieldErr) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Errs: []FieldErr{{Msg: err.Error()}}}
	}
	s, t, err := parse(b, path, checks)
	var fe *FileError
	if err != nil && !errors.As(err, &fe) {
		return nil, err
	}
	var errs []FieldErr
	if fe != nil {
		errs = fe.Errs
	}
	var workloads []Workload
	if s != nil {
		workloads = s.Workloads
	}
	for i, w := range workloads {
		if w.File == "" {
			continue
		}
		p := fmt.Sprintf("workloads[%d].file", i)
		m, err := os.ReadFile(WorkloadPath(path, w.File))
		if err != nil {
			errs = append(errs, FieldErr{Path: p, Msg: err.Error()})
			continue
		}
		if msg := checkManifest(m); msg != "" {
			errs = append(errs, FieldErr{Path: p, Msg: w.File + ": " + msg})
		}
	}
	if len(errs) > 0 {
		return nil, &FileError{File: path, Errs: sortByLine(t.withLines(errs))}
	}
	return s, nil
}

// WorkloadPath is where a workload's file is: relative to the scenario
// file's directory, unless absolute.
func WorkloadPath(scenarioFile, file string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(filepath.Dir(scenarioFile), file)
}

// Parse decodes a scenario strictly (unknown and duplicate keys are errors
// naming their field path), fills its defaults (SetDefaults) and validates
// it (Validate), then runs checks (more that can be known before the drill
// runs; see Load). file names the source in errors. Every error is a
// *FileError holding every error found, each with its field path (list
// indexes and map keys: cluster.pools[1].labels[gpu]) and its line: a
// value of the wrong type hides neither the other decoding errors nor
// validation's.
func Parse(b []byte, file string, checks ...func(*Scenario) []FieldErr) (*Scenario, error) {
	s, _, err := parse(b, file, checks)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// parse is Parse, also returning the file's tree (nil when it is not
// YAML) for the lines of later errors, and, with the errors, the scenario
// as decoded (nil when it could not be).
func parse(b []byte, file string, checks []func(*Scenario) []FieldErr) (*Scenario, *tree, error) {
	t, err := parseTree(b)
	if err != nil {
		// Not YAML, or more than one document: the decoder says where.
		s := &Scenario{}
		if derr := strict.YAML(b, s); derr != nil {
			return nil, nil, &FileError{File: file, Errs: decodeErrs(derr)}
		}
		// What the YAML 1.2 parser refused, the decoder read: judge it
		// without lines.
		return finish(s, file, nil, nil, checks)
	}
	c := &checker{t: t}
	c.check(t.root, reflect.TypeFor[Scenario](), nil, "")
	s := &Scenario{}
	clean, err := t.encode()
	if err == nil {
		err = strict.YAML(clean, s)
	}
	if err != nil {
		// The checker missed something the decoder refuses: say both.
		return nil, t, &FileError{File: file, Errs: t.withLines(append(c.errs, decodeErrs(err)...))}
	}
	return finish(s, file, t, c, checks)
}

// finish fills s's defaults and validates it. c holds the decoding
// errors: what validation finds at their paths or below is not said again,
// nor what it finds on the field holding a value of the wrong type (its
// stand-in is empty: "no nodes" for pools that are not a list).
func finish(s *Scenario, file string, t *tree, c *checker, checks []func(*Scenario) []FieldErr) (*Scenario, *tree, error) {
	s.SetDefaults()
	var errs []FieldErr
	var said []string
	if c != nil {
		errs = c.errs
		for _, e := range c.errs {
			said = append(said, e.Path)
		}
		for _, p := range c.replaced {
			said = append(said, parentPath(p))
		}
	}
	later := s.Validate()
	for _, check := range checks {
		later = append(later, check(s)...)
	}
	for _, e := range later {
		if !slices.ContainsFunc(said, func(p string) bool { return under(e.Path, p) }) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return s, t, &FileError{File: file, Errs: sortByLine(t.withLines(errs))}
	}
	return s, t, nil
}

// under: path is at or below top ("" is the document: nothing is below
// it here).
func under(path, top string) bool {
	return top != "" && (path == top || strings.HasPrefix(path, top+".") || strings.HasPrefix(path, top+"["))
}

// sortByLine puts errors in the order of the file (those without a line,
// about the file as a whole, first).
func sortByLine(errs []FieldErr) []FieldErr {
	slices.SortStableFunc(errs, func(a, b FieldErr) int { return a.Line - b.Line })
	return errs
}

// decodeErrs turns a strict decoding error into field errors.
func decodeErrs(err error) []FieldErr {
	var fe *strict.FieldError
	if errors.As(err, &fe) {
		var errs []FieldErr
		for _, p := range fe.Unknown {
			errs = append(errs, FieldErr{Path: p, Msg: "unknown field (fields are case-sensitive)"})
		}
		for _, p := range fe.Duplicate {
			errs = append(errs, FieldErr{Path: p, Msg: "duplicate field"})
		}
		return errs
	}
	var te *strict.TypeError
	if errors.As(err, &te) {
		return []FieldErr{{Path: te.Path, Msg: fmt.Sprintf("a %s where a %s belongs", te.Value, te.Type)}}
	}
	return []FieldErr{{Msg: err.Error()}}
}

// checkManifest says what is wrong with a workload's YAML: each document
// must be a Kubernetes object (apiVersion, kind, metadata.name).
func checkManifest(b []byte) string {
	dec := yaml2.NewDecoder(bytes.NewReader(b))
	n := 0
	for i := 0; ; i++ {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Sprintf("document %d: %v", i+1, err)
		}
		if doc == nil {
			continue
		}
		n++
		if msg := checkObject(doc); msg != "" {
			return fmt.Sprintf("document %d: %s", i+1, msg)
		}
	}
	if n == 0 {
		return "no object in it"
	}
	return ""
}

func checkObject(doc map[string]any) string {
	for _, k := range []string{"apiVersion", "kind"} {
		if s, _ := doc[k].(string); s == "" {
			return "no " + k + ": not a Kubernetes object"
		}
	}
	meta, _ := doc["metadata"].(map[any]any)
	if name, _ := meta["name"].(string); name == "" {
		if gen, _ := meta["generateName"].(string); gen == "" {
			return fmt.Sprintf("%s without metadata.name", doc["kind"])
		}
	}
	return ""
}
