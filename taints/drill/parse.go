package drill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	yaml2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/selftaint/selftaint/probes/strict"
)

// FieldErr is one thing wrong in a scenario file, at a field path such as
// "steps[1].fault" or "cluster.pools[0].count" (empty for the whole file).
type FieldErr struct {
	Path string `json:"path,omitempty"`
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

// Error names the file, then each field error, joined by "; ".
func (e *FileError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		msgs[i] = fe.Error()
	}
	file := e.File
	if file == "" {
		file = "drill"
	}
	return file + ": " + strings.Join(msgs, "; ")
}

// ConfigError is the FileError for a cluster.config the agent's config
// parser refused. The check itself is the runner's (agent/config imports
// taints, so taints/drill cannot import it); this keeps its report and
// exit status those of every other bad field.
func ConfigError(file string, err error) *FileError {
	return &FileError{File: file, Errs: []FieldErr{{Path: "cluster.config", Msg: err.Error()}}}
}

// Load reads and parses the scenario file at path (see Parse), and also
// checks that each workloads[i].file (relative to the scenario's
// directory) can be read and holds Kubernetes objects.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Errs: []FieldErr{{Msg: err.Error()}}}
	}
	s, err := Parse(b, path)
	if err != nil {
		return nil, err
	}
	var errs []FieldErr
	for i, w := range s.Workloads {
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
		return nil, &FileError{File: path, Errs: errs}
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
// it (Validate). file names the source in errors. Every error is a
// *FileError.
func Parse(b []byte, file string) (*Scenario, error) {
	if errs := preScan(b); len(errs) > 0 {
		return nil, &FileError{File: file, Errs: errs}
	}
	s := &Scenario{}
	if err := strict.YAML(b, s); err != nil {
		return nil, &FileError{File: file, Errs: decodeErrs(b, err)}
	}
	s.SetDefaults()
	if errs := s.Validate(); len(errs) > 0 {
		return nil, &FileError{File: file, Errs: errs}
	}
	return s, nil
}

// decodeErrs turns a strict decoding error of document b into field
// errors.
func decodeErrs(b []byte, err error) []FieldErr {
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
		msg := fmt.Sprintf("%s %s where %s %s belongs", article(te.Value), te.Value, article(te.Type), te.Type)
		if te.Value == "bool" && te.Type == "string" {
			msg += ` (YAML reads True, yes, on as booleans: quote it, status: "True")`
		}
		return []FieldErr{{Path: indexedPath(b, te), Msg: msg}}
	}
	return []FieldErr{{Msg: err.Error()}}
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// indexedPath puts the list indexes back into a type error's path
// (encoding/json's leaves them out: "steps.fault.status"), by finding the
// value of the wrong type in the document: "steps[0].fault.status". When
// it cannot, the path stays as it was.
func indexedPath(b []byte, te *strict.TypeError) string {
	var doc yaml2.MapSlice
	if te.Path == "" || yaml2.Unmarshal(b, &doc) != nil {
		return te.Path
	}
	kind, _, _ := strings.Cut(te.Value, " ") // "number 1.5"
	// An embedded struct's Go name ("Nodes") is in the path, not in the
	// file: every key of a drill file starts in lower case.
	var segs []string
	for _, seg := range strings.Split(te.Path, ".") {
		if seg != "" && !unicode.IsUpper(rune(seg[0])) {
			segs = append(segs, seg)
		}
	}
	var found []string
	findKind(doc, segs, "", kind, &found)
	if len(found) == 0 {
		return strings.Join(segs, ".")
	}
	return found[0]
}

// findKind appends to found the paths in v along segs (list indexes
// added wherever a list is) whose value is of JSON kind kind, or, at the
// end of segs, a list's elements of that kind.
func findKind(v any, segs []string, path, kind string, found *[]string) {
	l, isList := v.([]any)
	if len(segs) == 0 && (!isList || kind == "array") {
		if jsonKind(v) == kind {
			*found = append(*found, path)
		}
		return
	}
	if isList { // the elements of a list of the wrong kind
		for i, e := range l {
			findKind(e, segs, fmt.Sprintf("%s[%d]", path, i), kind, found)
		}
		return
	}
	m, _ := v.(yaml2.MapSlice)
	for _, item := range m {
		if k := fmt.Sprint(item.Key); k == segs[0] {
			p := k
			if path != "" {
				p = path + "." + k
			}
			findKind(item.Value, segs[1:], p, kind, found)
		}
	}
}

// jsonKind names a decoded YAML value's JSON kind as encoding/json's type
// errors do.
func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case string:
		return "string"
	case int, int64, uint64, float64:
		return "number"
	case []any:
		return "array"
	case yaml2.MapSlice:
		return "object"
	}
	return ""
}

// preScan finds, before decoding, what decoding reports without a field
// path: keys given twice in a mapping, and capacity quantities that do
// not parse. A document that is not YAML is left to the decoder.
func preScan(b []byte) []FieldErr {
	var doc yaml2.MapSlice
	if err := yaml2.Unmarshal(b, &doc); err != nil {
		return nil
	}
	var errs []FieldErr
	duplicateKeys(doc, "", &errs)
	if len(errs) > 0 {
		return errs
	}
	return badQuantities(doc)
}

func duplicateKeys(v any, path string, errs *[]FieldErr) {
	switch t := v.(type) {
	case yaml2.MapSlice:
		seen := map[string]bool{}
		for _, item := range t {
			k := fmt.Sprint(item.Key)
			p := k
			if path != "" {
				p = path + "." + k
			}
			if seen[k] {
				*errs = append(*errs, FieldErr{Path: p, Msg: "duplicate field"})
			}
			seen[k] = true
			duplicateKeys(item.Value, p, errs)
		}
	case []any:
		for i, e := range t {
			duplicateKeys(e, fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

// badQuantities checks cluster.pools[*].capacity's values.
func badQuantities(doc yaml2.MapSlice) []FieldErr {
	pools, _ := lookup(lookup(doc, "cluster"), "pools").([]any)
	var errs []FieldErr
	for i, p := range pools {
		capacity, _ := lookup(p, "capacity").(yaml2.MapSlice)
		for _, item := range capacity {
			v := fmt.Sprint(item.Value)
			if _, err := resource.ParseQuantity(v); err != nil {
				errs = append(errs, FieldErr{
					Path: fmt.Sprintf("cluster.pools[%d].capacity.%v", i, item.Key),
					Msg:  fmt.Sprintf("%q is not a quantity (such as 4, 500m, 16Gi)", v),
				})
			}
		}
	}
	return errs
}

func lookup(v any, key string) any {
	m, _ := v.(yaml2.MapSlice)
	for _, item := range m {
		if fmt.Sprint(item.Key) == key {
			return item.Value
		}
	}
	return nil
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
