package strict_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/selftaint/selftaint/probes/strict"
)

type leaf struct {
	Name  string   `json:"name"`
	Count int      `json:"count,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// stamp has its own syntax, like the config's Duration: a leaf to the
// strict checks.
type stamp struct{ t time.Time }

func (s *stamp) UnmarshalJSON(b []byte) error { return s.t.UnmarshalJSON(b) }

type doc struct {
	Top    string          `json:"top"`
	Inner  *leaf           `json:"inner,omitempty"`
	List   []leaf          `json:"list,omitempty"`
	ByName map[string]leaf `json:"byName,omitempty"`
	At     *stamp          `json:"at,omitempty"`
}

// decodeCase is one row of the decoding tables.
type decodeCase struct {
	name string
	in   string
	// want is the decoded value's shape when no error is expected.
	want string
	// wantErr is a substring of the error; kind names its type.
	wantErr string
	kind    string
}

func TestJSON(t *testing.T) {
	tests := []decodeCase{
		{name: "valid", in: `{"top":"a","inner":{"name":"n","count":2},"list":[{"name":"x"}]}`, want: `{Top:a Inner:{Name:n Count:2 Tags:[]} List:[{Name:x Count:0 Tags:[]}] ByName:map[] At:<nil>}`},
		{name: "unknown top-level field", in: `{"top":"a","tpo":"b"}`, wantErr: `unknown field "tpo"`, kind: "field"},
		{name: "unknown field at depth", in: `{"inner":{"name":"n","cuont":1}}`, wantErr: `unknown field "inner.cuont"`, kind: "field"},
		{name: "unknown field in a list element", in: `{"list":[{"name":"a"},{"name":"b","tag":["x"]}]}`, wantErr: `unknown field "list[1].tag"`, kind: "field"},
		{name: "unknown field in a map value", in: `{"byName":{"k":{"nme":"a"}}}`, wantErr: `unknown field "byName.k.nme"`, kind: "field"},
		{name: "every unknown field, sorted", in: `{"z":1,"list":[{"b":2}],"a":3}`, wantErr: `unknown field "a", "list[0].b", "z"`, kind: "field"},
		{name: "case-sensitive", in: `{"Top":"a"}`, wantErr: `unknown field "Top"`, kind: "field"},
		{name: "duplicate field", in: `{"top":"a","top":"b"}`, wantErr: `duplicate field "top"`, kind: "field"},
		{name: "duplicate field at depth", in: `{"inner":{"name":"a","name":"b"}}`, wantErr: `duplicate field "inner.name"`, kind: "field"},
		{name: "unknown and duplicate", in: `{"top":"a","top":"b","x":1}`, wantErr: `unknown field "x"; duplicate field "top"`, kind: "field"},
		// encoding/json's path of a wrong type leaves out list indexes.
		{name: "wrong type names the path", in: `{"list":[{"count":"3"}]}`, wantErr: `list.count: cannot unmarshal string into a field of type int`, kind: "type"},
		{name: "wrong top-level type", in: `[1]`, wantErr: "cannot unmarshal array into a value of type strict_test.doc", kind: "type"},
		{name: "syntax error", in: `{"top":`, wantErr: "unexpected end of JSON input"},
		{name: "trailing value", in: `{"top":"a"} {}`, wantErr: "invalid character '{' after top-level value", kind: "trailing"},
		{name: "trailing garbage", in: `{"top":"a"}x`, wantErr: "after top-level value", kind: "trailing"},
		{name: "trailing white space is fine", in: "{\"top\":\"a\"}\n\t ", want: `{Top:a Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "null document decodes nothing", in: `null`, want: `{Top: Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "null field is the zero value", in: `{"top":null,"inner":null,"list":null}`, want: `{Top: Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "own syntax is a leaf", in: `{"at":"2026-11-23T12:00:00Z"}`, want: `{Top: Inner:<nil> List:[] ByName:map[] At:0x}`},
		{name: "own syntax error passes through", in: `{"at":"yesterday"}`, wantErr: `parsing time "yesterday"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got doc
			check(t, "JSON", tt.in, &got, strict.JSON([]byte(tt.in), &got), tt.want, tt.wantErr, tt.kind)
		})
	}
}

func TestYAML(t *testing.T) {
	tests := []decodeCase{
		{name: "valid", in: "top: a\nlist:\n- name: x\n  count: 2\n", want: `{Top:a Inner:<nil> List:[{Name:x Count:2 Tags:[]}] ByName:map[] At:<nil>}`},
		{name: "JSON is YAML", in: `{"top":"a"}`, want: `{Top:a Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "unknown field at depth", in: "inner:\n  name: nn\n  cuont: 1\n", wantErr: `unknown field "inner.cuont"`, kind: "field"},
		{name: "unknown field in a list element", in: "list:\n- name: a\n- name: b\n  tag: [x]\n", wantErr: `unknown field "list[1].tag"`, kind: "field"},
		{name: "duplicate key", in: "top: a\ntop: b\n", wantErr: `key "top" already set in map`},
		{name: "wrong type", in: "inner:\n  count: many\n", wantErr: "inner.count: cannot unmarshal string into a field of type int", kind: "type"},
		{name: "second document", in: "top: a\n---\ntop: b\n", wantErr: "more than one YAML document", kind: "trailing"},
		{name: "leading and trailing separators are one document", in: "---\ntop: a\n---\n", want: `{Top:a Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "empty document", in: "# nothing\n", want: `{Top: Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "null field", in: "top: null\ninner: ~\n", want: `{Top: Inner:<nil> List:[] ByName:map[] At:<nil>}`},
		{name: "not YAML", in: "top: [", wantErr: "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got doc
			check(t, "YAML", tt.in, &got, strict.YAML([]byte(tt.in), &got), tt.want, tt.wantErr, tt.kind)
		})
	}
}

// check compares a decoding's outcome with the table row: the decoded
// value's shape when wantErr is empty, else the error's text and kind.
func check(t *testing.T, fn, in string, got *doc, err error, want, wantErr, kind string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("%s(%q): got error %v, want nil", fn, in, err)
		}
		if g := shape(*got); g != want {
			t.Errorf("%s(%q) = %s, want %s", fn, in, g, want)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("%s(%q): got error %v, want one containing %q", fn, in, err, wantErr)
	}
	if k := kindOf(err); k != kind {
		t.Errorf("%s(%q): error %v is of kind %q, want %q", fn, in, err, k, kind)
	}
}

// TestFieldErrorLists checks the paths a caller gets to word its own
// message (the config adds a hint, fault annotations a suggestion).
func TestFieldErrorLists(t *testing.T) {
	var d doc
	err := strict.JSON([]byte(`{"b":1,"a":2,"top":"x","top":"y","list":[{"name":"n","name":"m"}]}`), &d)
	var fe *strict.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want a *strict.FieldError", err)
	}
	if got, want := fmt.Sprint(fe.Unknown, fe.Duplicate), "[a b] [list[0].name top]"; got != want {
		t.Errorf("unknown, duplicate = %s, want %s", got, want)
	}
}

// shape prints d with pointers reduced to nil or not, and nil and empty
// collections alike.
func shape(d doc) string {
	inner := "<nil>"
	if d.Inner != nil {
		inner = fmt.Sprintf("{Name:%s Count:%d Tags:%v}", d.Inner.Name, d.Inner.Count, d.Inner.Tags)
	}
	at := "<nil>"
	if d.At != nil {
		at = "0x"
	}
	var list []string
	for _, l := range d.List {
		list = append(list, fmt.Sprintf("{Name:%s Count:%d Tags:%v}", l.Name, l.Count, l.Tags))
	}
	return fmt.Sprintf("{Top:%s Inner:%s List:[%s] ByName:map[%s] At:%s}", d.Top, inner, strings.Join(list, " "), mapShape(d.ByName), at)
}

func mapShape(m map[string]leaf) string {
	var out []string
	for k, v := range m {
		out = append(out, k+":"+v.Name)
	}
	return strings.Join(out, " ")
}

func kindOf(err error) string {
	var fe *strict.FieldError
	var te *strict.TypeError
	var td *strict.TrailingDataError
	switch {
	case errors.As(err, &fe):
		return "field"
	case errors.As(err, &te):
		return "type"
	case errors.As(err, &td):
		return "trailing"
	}
	return ""
}
