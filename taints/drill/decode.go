package drill

// Decoding a drill file so that one error hides no other: the file's YAML
// tree is checked against Scenario's fields (unknown and duplicate keys,
// values of the wrong type, quantities that do not parse), each error
// named by its full path (list indexes and map keys:
// cluster.pools[1].labels[gpu]) and its line; what is wrong is replaced by
// a stand-in of the right type, so that the rest decodes and is validated
// too.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	yaml2 "go.yaml.in/yaml/v2"
	yaml3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// tree is a drill file's YAML, as parsed, with the line of each field
// path found in it.
type tree struct {
	root  *yaml3.Node
	lines map[string]int
}

// parseTree parses b as one YAML document. It fails on what is not YAML,
// and on a second document.
func parseTree(b []byte) (*tree, error) {
	dec := yaml3.NewDecoder(strings.NewReader(string(b)))
	var root *yaml3.Node
	for {
		var doc yaml3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue
		}
		if root != nil {
			return nil, errors.New("more than one YAML document (a second one starts with ---); want one")
		}
		root = doc.Content[0]
	}
	if root == nil {
		root = &yaml3.Node{Kind: yaml3.MappingNode, Tag: "!!map", Line: 1}
	}
	return &tree{root: root, lines: map[string]int{}}, nil
}

// line is the line of path in the file, or of the nearest field above it
// that is there (a required field left out: the line of what holds it); 0
// when none is.
func (t *tree) line(path string) int {
	if t == nil {
		return 0
	}
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := t.lines[p]; ok {
			return l
		}
	}
	return 0
}

// parentPath is path without its last step: "a.b[2]" -> "a.b" -> "a";
// "labels[x.y/z]" -> "labels".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// withLines sets each error's Line from the tree.
func (t *tree) withLines(errs []FieldErr) []FieldErr {
	for i := range errs {
		if errs[i].Line == 0 && errs[i].Path != "" {
			errs[i].Line = t.line(errs[i].Path)
		}
	}
	return errs
}

// encode writes the (checked) tree back as YAML.
func (t *tree) encode() ([]byte, error) {
	var b strings.Builder
	enc := yaml3.NewEncoder(&b)
	if err := enc.Encode(t.root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	durationType    = reflect.TypeFor[Duration]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
)

// checker walks the tree along a Go type, as encoding/json would decode
// its JSON form into it.
type checker struct {
	t    *tree
	errs []FieldErr
	// replaced are the paths whose values were of the wrong type, now
	// stand-ins.
	replaced []string
}

func (c *checker) add(p *field.Path, n *yaml3.Node, format string, args ...any) {
	c.errs = append(c.errs, FieldErr{Path: p.String(), Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

// check checks n, at path p (nil: the document), against type t, records
// the lines of the paths it passes, and replaces what does not fit by a
// stand-in of the right type (the error said, the stand-in is never
// reported again: see Parse).
func (c *checker) check(n *yaml3.Node, t reflect.Type, p *field.Path, key string) {
	if n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if p != nil {
		if _, ok := c.t.lines[p.String()]; !ok {
			c.t.lines[p.String()] = n.Line
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return // JSON null: the zero value
	}
	switch {
	case t == durationType:
		return // any value: Validate says what is not a duration
	case t == quantityType:
		c.quantity(n, p)
		return
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return // its own syntax
	}
	switch t.Kind() {
	case reflect.Struct:
		if c.kind(n, yaml3.MappingNode, t, p, key) {
			c.object(n, t, p)
		}
	case reflect.Map:
		if c.kind(n, yaml3.MappingNode, t, p, key) {
			c.mapping(n, t, p)
		}
	case reflect.Slice:
		if c.kind(n, yaml3.SequenceNode, t, p, key) {
			for i, e := range n.Content {
				c.check(e, t.Elem(), p.Index(i), "")
			}
		}
	default:
		c.scalar(n, t, p, key)
	}
}

// kind says whether n is of kind want; if not, reports it and makes n an
// empty one.
func (c *checker) kind(n *yaml3.Node, want yaml3.Kind, t reflect.Type, p *field.Path, key string) bool {
	if n.Kind == want {
		return true
	}
	c.mismatch(n, t, p, key)
	switch want {
	case yaml3.MappingNode:
		*n = yaml3.Node{Kind: yaml3.MappingNode, Tag: "!!map", Style: yaml3.FlowStyle, Line: n.Line, Column: n.Column}
	default:
		*n = yaml3.Node{Kind: yaml3.SequenceNode, Tag: "!!seq", Style: yaml3.FlowStyle, Line: n.Line, Column: n.Column}
	}
	return false
}

// object checks a mapping against struct type t: every key one of its
// fields (json names; embedded structs' fields inline), none twice.
func (c *checker) object(n *yaml3.Node, t reflect.Type, p *field.Path) {
	fields := jsonFields(t)
	seen := map[string]bool{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		fp := child(p, name)
		f, known := fields[name]
		switch {
		case k.Tag == "!!merge":
			kept = append(kept, k, v) // YAML's merge key: left to the decoder
			continue
		case !known:
			c.errs = append(c.errs, FieldErr{Path: fp.String(), Line: k.Line, Msg: unknownField(name, fields)})
			continue
		case seen[name]:
			c.errs = append(c.errs, FieldErr{Path: fp.String(), Line: k.Line, Msg: "duplicate field"})
			continue
		}
		seen[name] = true
		c.t.lines[fp.String()] = k.Line
		c.check(v, f, fp, name)
		kept = append(kept, k, v)
	}
	n.Content = kept
}

// mapping checks a mapping against map type t: no key twice, each value
// of t's value type. An entry whose value does not fit is left out.
func (c *checker) mapping(n *yaml3.Node, t reflect.Type, p *field.Path) {
	seen := map[string]bool{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := p.Key(k.Value)
		if seen[k.Value] {
			c.errs = append(c.errs, FieldErr{Path: kp.String(), Line: k.Line, Msg: "duplicate key"})
			continue
		}
		seen[k.Value] = true
		c.t.lines[kp.String()] = k.Line
		before := len(c.errs)
		c.check(v, t.Elem(), kp, k.Value)
		if len(c.errs) > before && t.Elem() == quantityType {
			continue
		}
		kept = append(kept, k, v)
	}
	n.Content = kept
}

// quantity checks a resource quantity (a string or a number).
func (c *checker) quantity(n *yaml3.Node, p *field.Path) {
	if n.Kind != yaml3.ScalarNode {
		c.add(p, n, "%s where a quantity (such as 4, 500m, 16Gi) belongs", valueWord(n))
		return
	}
	if _, err := resource.ParseQuantity(n.Value); err != nil {
		c.add(p, n, "%q is not a quantity (such as 4, 500m, 16Gi)", n.Value)
	}
}

// scalar checks n against a string, int or bool type; a value of another
// type is reported and replaced: by its text for a string (what quoting
// it would give), by the zero value otherwise.
func (c *checker) scalar(n *yaml3.Node, t reflect.Type, p *field.Path, key string) {
	v, isScalar := scalarValue(n)
	ok := false
	if isScalar {
		switch t.Kind() {
		case reflect.String:
			_, ok = v.(string)
		case reflect.Bool:
			_, ok = v.(bool)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			ok = isWholeNumber(v)
		case reflect.Float32, reflect.Float64:
			ok = isNumber(v)
		default:
			ok = true
		}
	}
	if ok {
		return
	}
	c.mismatch(n, t, p, key)
	line, col := n.Line, n.Column
	switch t.Kind() {
	case reflect.String:
		text := "?"
		if isScalar {
			text = n.Value
		}
		*n = yaml3.Node{Kind: yaml3.ScalarNode, Tag: "!!str", Value: text, Style: yaml3.DoubleQuotedStyle}
	case reflect.Bool:
		*n = yaml3.Node{Kind: yaml3.ScalarNode, Tag: "!!bool", Value: "false"}
	default:
		*n = yaml3.Node{Kind: yaml3.ScalarNode, Tag: "!!int", Value: "0"}
	}
	n.Line, n.Column = line, col
}

// mismatch reports n, which is not of type t: "a bool where a string
// belongs", with how to quote it where a string belongs.
func (c *checker) mismatch(n *yaml3.Node, t reflect.Type, p *field.Path, key string) {
	c.replaced = append(c.replaced, p.String())
	msg := fmt.Sprintf("%s where %s belongs", valueWord(n), typeWord(t))
	if v, isScalar := scalarValue(n); isScalar && t.Kind() == reflect.String {
		quoted := strconv.Quote(n.Value)
		if key != "" {
			quoted = key + ": " + quoted
		}
		switch v.(type) {
		case bool:
			msg += fmt.Sprintf(" (YAML reads %s as a boolean: quote it, %s)", n.Value, quoted)
		default:
			msg += fmt.Sprintf(" (YAML reads %s as a number: quote it, %s)", n.Value, quoted)
		}
	}
	c.add(p, n, "%s", msg)
}

// scalarValue is n's value as the YAML-to-JSON conversion the drill's
// decoder uses reads it (YAML 1.1, as go.yaml.in/yaml/v2: True, yes, on
// are booleans), and whether n is a scalar at all.
func scalarValue(n *yaml3.Node) (any, bool) {
	if n.Kind != yaml3.ScalarNode {
		return nil, false
	}
	switch {
	case n.Style&(yaml3.DoubleQuotedStyle|yaml3.SingleQuotedStyle|yaml3.LiteralStyle|yaml3.FoldedStyle) != 0:
		return n.Value, true
	case n.Style&yaml3.TaggedStyle != 0 && n.Tag == "!!str":
		return n.Value, true
	}
	var v any
	if err := yaml2.Unmarshal([]byte(n.Value), &v); err != nil {
		return n.Value, true
	}
	switch v.(type) {
	case nil, bool, int, int64, uint64, float64, string:
		return v, true
	}
	return n.Value, true
}

func isNull(n *yaml3.Node) bool {
	if n.Kind != yaml3.ScalarNode {
		return false
	}
	v, _ := scalarValue(n)
	return v == nil
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int64, uint64, float64:
		return true
	}
	return false
}

// isWholeNumber: v decodes into an integer (JSON writes 2.0 as 2).
func isWholeNumber(v any) bool {
	switch x := v.(type) {
	case int, int64, uint64:
		return true
	case float64:
		return x == float64(int64(x))
	}
	return false
}

// valueWord names what n is: "a string", "a bool", "a number 1.5", "a
// list", "a mapping".
func valueWord(n *yaml3.Node) string {
	switch n.Kind {
	case yaml3.MappingNode:
		return "a mapping"
	case yaml3.SequenceNode:
		return "a list"
	}
	v, _ := scalarValue(n)
	switch v.(type) {
	case bool:
		return "a bool"
	case int, int64, uint64:
		return "a number"
	case float64:
		return "a number " + n.Value
	}
	return "a string"
}

// typeWord names what belongs: "a string", "an int", "a bool", "a list",
// "a mapping".
func typeWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a bool"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "an int"
}

// child is p's field name (the document's when p is nil).
func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

// jsonFields are the fields of struct type t by their JSON names, with
// embedded structs' fields inline, as encoding/json decodes them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// unknownField says a key is no field, and which one it may be meant for:
// one that differs by case only, or by a letter or two ("condtion").
func unknownField(name string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for k := range fields {
		d := editDistance(strings.ToLower(k), strings.ToLower(name))
		if d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	switch {
	case best != "" && strings.EqualFold(best, name):
		return fmt.Sprintf("unknown field (fields are case-sensitive: %s)", best)
	case best != "" && bestDist <= min(2, len(name)/3):
		return fmt.Sprintf("unknown field (did you mean %s?)", best)
	}
	return "unknown field (fields are case-sensitive)"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
