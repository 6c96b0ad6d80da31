// Package strict decodes JSON and YAML strictly, with errors that name each
// offending field by its full path ("probes.memory.intervall",
// "rules[1].timout"). It exists so that the config file, node-problem-
// detector plugin files and fault annotations share one decoder instead of
// three hand-written ones that each walk types to find typos.
//
// Strict means: object keys match struct fields case-sensitively, a key no
// field declares is an error, a key given twice is an error, and nothing
// may follow the one top-level value (for YAML: one document). A null
// leaves the target as it was, as encoding/json does; callers that need a
// value check for it after decoding. The package is built on sigs.k8s.io/json
// (the decoder Kubernetes uses for strict field validation) and imports
// nothing from Kubernetes' API machinery, so probes may use it.
package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	yaml2 "go.yaml.in/yaml/v2"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// FieldError lists the fields that made a strict decoding fail, each by its
// full path from the top-level value: object keys joined by '.', list
// indexes in brackets.
type FieldError struct {
	// Unknown are the paths of keys that no struct field declares, sorted.
	Unknown []string
	// Duplicate are the paths of keys given more than once in one object,
	// sorted.
	Duplicate []string
}

// Error says `unknown field "a", "b.c"`, then `duplicate field "d"`, joined
// by "; " when both kinds occur.
func (e *FieldError) Error() string {
	var parts []string
	if len(e.Unknown) > 0 {
		parts = append(parts, "unknown field "+quoteAll(e.Unknown))
	}
	if len(e.Duplicate) > 0 {
		parts = append(parts, "duplicate field "+quoteAll(e.Duplicate))
	}
	return strings.Join(parts, "; ")
}

func quoteAll(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = fmt.Sprintf("%q", p)
	}
	return strings.Join(q, ", ")
}

// TypeError is a value of the wrong JSON type for its field, such as a
// string where a number belongs.
type TypeError struct {
	// Path is the field's full path; empty for the top-level value.
	Path string
	// Value describes the JSON value: "string", "number", "array", ...
	Value string
	// Type is the Go type it could not be decoded into.
	Type string
}

func (e *TypeError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("cannot unmarshal %s into a value of type %s", e.Value, e.Type)
	}
	return fmt.Sprintf("%s: cannot unmarshal %s into a field of type %s", e.Path, e.Value, e.Type)
}

// TrailingDataError is data after the one top-level JSON value, or a second
// YAML document.
type TrailingDataError struct {
	// Err is the underlying error, such as the JSON syntax error "invalid
	// character '{' after top-level value".
	Err error
}

func (e *TrailingDataError) Error() string { return e.Err.Error() }

func (e *TrailingDataError) Unwrap() error { return e.Err }

// JSON decodes data into v, which must be a non-nil pointer, strictly (see
// the package comment). It returns a *FieldError for unknown or duplicate
// fields (v is then filled as far as decoding got), a *TypeError for a
// value of the wrong type, a *TrailingDataError for data after the value,
// and otherwise the decoder's own error (a syntax error, or one from a
// type's UnmarshalJSON).
func JSON(data []byte, v any) error {
	fieldErrs, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return describe(data, err)
	}
	if len(fieldErrs) == 0 {
		return nil
	}
	fe := &FieldError{}
	for _, e := range fieldErrs {
		var pe kjson.FieldError
		if !errors.As(e, &pe) {
			return fmt.Errorf("strict decoding: %w", e)
		}
		switch {
		case strings.HasPrefix(pe.Error(), "duplicate field"):
			fe.Duplicate = append(fe.Duplicate, pe.FieldPath())
		default:
			fe.Unknown = append(fe.Unknown, pe.FieldPath())
		}
	}
	slices.Sort(fe.Unknown)
	slices.Sort(fe.Duplicate)
	return fe
}

// describe turns a decoding error into this package's error types where
// one fits.
func describe(data []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		t := "<nil>"
		if te.Type != nil {
			t = te.Type.String()
		}
		return &TypeError{Path: te.Field, Value: te.Value, Type: t}
	}
	if isSyntax, _ := kjson.SyntaxErrorOffset(err); isSyntax && hasTrailingData(data) {
		return &TrailingDataError{Err: err}
	}
	return err
}

// hasTrailingData reports whether data holds one complete JSON value
// followed by something other than white space.
func hasTrailingData(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return false
	}
	return len(bytes.TrimSpace(data[dec.InputOffset():])) > 0
}

// YAML decodes one YAML (or JSON) document into v strictly: a key repeated
// in a mapping and a second non-empty document are errors too. It converts
// the document to JSON and decodes that with JSON, so the errors are the
// same; an empty document leaves v as it was.
func YAML(data []byte, v any) error {
	if err := oneDocument(data); err != nil {
		return err
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
	}
	return JSON(js, v)
}

// oneDocument fails when data holds more than one non-empty YAML document.
// A syntax error is left for the conversion to report.
func oneDocument(data []byte) error {
	dec := yaml2.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var doc any
		err := dec.Decode(&doc)
		if err != nil { // io.EOF, or a syntax error the conversion reports
			return nil
		}
		if doc == nil {
			continue
		}
		if docs++; docs > 1 {
			return &TrailingDataError{Err: errors.New("more than one YAML document (a second one starts with ---); want one")}
		}
	}
}
