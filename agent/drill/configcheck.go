package drill

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	yaml3 "go.yaml.in/yaml/v3"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/probes/strict"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// configField is cluster.config's path in a drill file.
const configField = "cluster.config"

// ConfigFileError is a drill file whose cluster.config the agents' config
// parser refuses: every error it found, each at its line of the drill file.
// `selftaint drill` exits ExitBadFile on it, having started nothing.
type ConfigFileError struct {
	File string
	Errs []ConfigFieldError
}

// ConfigFieldError is one error in cluster.config: its line in the drill
// file (0 when unknown), its field's path from the drill file's top
// ("cluster.config.rules[0].fallbak"), and what is wrong.
type ConfigFieldError struct {
	Line int
	Path string
	Msg  string
}

// Error is one line per error, as compilers write them:
// "drill.yaml:15: cluster.config.rules[0].fallbak: unknown field".
func (e *ConfigFileError) Error() string {
	lines := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		at := e.File
		if at == "" {
			at = "drill"
		}
		if fe.Line > 0 {
			at += ":" + strconv.Itoa(fe.Line)
		}
		lines[i] = at + ": " + fe.Path + ": " + fe.Msg
	}
	return strings.Join(lines, "\n")
}

// CheckConfig loads the scenario's cluster.config as the agents load
// theirs and returns a *ConfigFileError for what it refuses, each error at
// its line of file (the drill file, read again for the lines; without it
// the errors carry no line). It creates nothing: `selftaint drill` runs it
// before it starts anything.
func CheckConfig(s *tdrill.Scenario, file string) error {
	_, err := config.Parse([]byte(s.Cluster.Config))
	if err == nil {
		return nil
	}
	var src []byte
	if file != "" {
		src, _ = os.ReadFile(file) // no lines without it
	}
	return &ConfigFileError{File: file, Errs: configErrors(src, s.Cluster.Config, err)}
}

// configErrors are config.Parse's err on text (cluster.config of the drill
// file src) as field errors at their lines of src.
func configErrors(src []byte, text string, err error) []ConfigFieldError {
	at := configLocator(src, text)
	var out []ConfigFieldError
	full := func(path string) string {
		if path == "" {
			return configField
		}
		return configField + "." + path
	}
	add := func(path, msg string) {
		out = append(out, ConfigFieldError{Line: at.line(path), Path: full(path), Msg: msg})
	}
	var fe *strict.FieldError
	var te *strict.TypeError
	var agg utilerrors.Aggregate
	switch {
	case errors.As(err, &fe):
		for _, p := range fe.Unknown {
			add(p, "unknown field (fields are case-sensitive; see deploy/configmap.yaml for every field)")
		}
		for _, p := range fe.Duplicate {
			add(p, "duplicate field")
		}
	case errors.As(err, &te):
		// Its path has no list indexes: the value of its kind along it
		// is the one.
		kind, _, _ := strings.Cut(te.Value, " ") // "number 1.5"
		line, path := at.typed(te.Path, kind)
		out = append(out, ConfigFieldError{Line: line, Path: full(path), Msg: fmt.Sprintf("%s %s where %s belongs", article(te.Value), te.Value, goKind(te.Type))})
	case errors.As(err, &agg):
		for _, e := range agg.Errors() {
			var ve *field.Error
			if errors.As(e, &ve) {
				add(ve.Field, ve.ErrorBody())
				continue
			}
			add("", e.Error())
		}
	default:
		// A YAML syntax error names its line of the config: the drill
		// file's is found from it.
		msg := strings.TrimPrefix(err.Error(), "decoding: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			n, _ := strconv.Atoi(m[1])
			if l := at.textLine(n); l > 0 {
				out = append(out, ConfigFieldError{Line: l, Path: configField, Msg: "YAML syntax: " + msg[len(m[0]):]})
				break
			}
		}
		add("", msg)
	}
	return out
}

// yamlLine finds the line a YAML error names.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// article is "a" or "an" for word.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// goKind names a Go type as a config's reader thinks of it: an anonymous
// struct or a map is an object, a slice a list.
func goKind(t string) string {
	switch {
	case strings.HasPrefix(t, "struct"), strings.HasPrefix(t, "map["):
		return "an object"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return article(t) + " " + t
}

// locator finds the line in the drill file of a path in its
// cluster.config.
type locator struct {
	configLine int         // the line of cluster.config's value in the drill file (0: unknown)
	literal    bool        // a literal block (|): its lines are the drill file's lines, one for one
	doc        *yaml3.Node // the config's parsed text (nil: not YAML)
}

// configLocator reads src (the drill file) and text (its cluster.config);
// either may be unreadable, and then the lines found are fewer.
func configLocator(src []byte, text string) locator {
	var l locator
	var file yaml3.Node
	if yaml3.Unmarshal(src, &file) == nil {
		if v := mappingValue(mappingValue(document(&file), "cluster"), "config"); v != nil {
			l.configLine = v.Line
			l.literal = v.Style&yaml3.LiteralStyle != 0
		}
	}
	var doc yaml3.Node
	if yaml3.Unmarshal([]byte(text), &doc) == nil {
		l.doc = document(&doc)
	}
	return l
}

// line is the drill file's line of path in the config: the line of the
// deepest node along it that exists; cluster.config's own line when the
// config's lines do not map onto the file's (not a literal block).
func (l locator) line(path string) int {
	if !l.literal || l.doc == nil || path == "" {
		return l.configLine
	}
	n := find(l.doc, pathSegments(path))
	if n == nil {
		return l.configLine
	}
	return l.textLine(n.Line)
}

// typed is the drill file's line of the value of JSON kind kind
// ("string", "number", "bool", "array", "object") along path (a path
// without list indexes, as type errors give it), and its path with the
// indexes; path and cluster.config's line when it is not found.
func (l locator) typed(path, kind string) (int, string) {
	if l.doc == nil {
		return l.configLine, path
	}
	segs := pathSegments(path)
	var found func(n *yaml3.Node, i int, at string) (int, string, bool)
	found = func(n *yaml3.Node, i int, at string) (int, string, bool) {
		if i == len(segs) {
			if nodeKind(n) == kind {
				return n.Line, at, true
			}
			if n.Kind != yaml3.SequenceNode || kind == "array" {
				return 0, "", false
			}
		}
		switch n.Kind {
		case yaml3.SequenceNode:
			for j, e := range n.Content {
				if line, p, ok := found(e, i, fmt.Sprintf("%s[%d]", at, j)); ok {
					return line, p, true
				}
			}
		case yaml3.MappingNode:
			if i == len(segs) {
				return 0, "", false
			}
			if _, v := mappingEntry(n, segs[i]); v != nil {
				p := segs[i]
				if at != "" {
					p = at + "." + p
				}
				return found(v, i+1, p)
			}
		}
		return 0, "", false
	}
	line, p, ok := found(l.doc, 0, "")
	if !ok {
		return l.configLine, path
	}
	return l.textLine(line), p
}

// nodeKind is a YAML node's JSON kind, as type errors name it.
func nodeKind(n *yaml3.Node) string {
	switch n.Kind {
	case yaml3.SequenceNode:
		return "array"
	case yaml3.MappingNode:
		return "object"
	case yaml3.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "bool"
		case "!!null":
			return "null"
		}
		return "string"
	}
	return ""
}

// textLine is the drill file's line of the config's line n (0: unknown).
func (l locator) textLine(n int) int {
	if l.configLine == 0 || !l.literal || n <= 0 {
		return 0
	}
	// A literal block's first line is the one after its indicator (|).
	return l.configLine + n
}

// pathSegments splits a field path ("rules[0].taint.key",
// "hardware.pci[1]", "x[nvidia.com/gpu]") into keys and bracketed
// indexes or keys. A type error's path names embedded structs by their
// Go names (upper case), which are not in the file: they are left out.
func pathSegments(path string) []string {
	var segs []string
	for path != "" {
		switch {
		case path[0] == '.':
			path = path[1:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(segs, path)
			}
			segs = append(segs, path[:end+1])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			if seg := path[:end]; !unicode.IsUpper(rune(seg[0])) {
				segs = append(segs, seg)
			}
			path = path[end:]
		}
	}
	return segs
}

// find is the deepest node along segs from n: the key's node for a
// mapping's key (its line is the field's), an element for an index. A
// sequence met with a key (a path without its indexes) is searched
// element by element.
func find(n *yaml3.Node, segs []string) *yaml3.Node {
	best := n
	for i, seg := range segs {
		key, bracketed := strings.CutPrefix(seg, "[")
		key = strings.TrimSuffix(key, "]")
		switch {
		case n.Kind == yaml3.SequenceNode && bracketed:
			idx, err := strconv.Atoi(key)
			if err != nil || idx < 0 || idx >= len(n.Content) {
				return best
			}
			n = n.Content[idx]
			best = n
		case n.Kind == yaml3.SequenceNode:
			for _, e := range n.Content {
				if m := find(e, segs[i:]); m != e {
					return m
				}
			}
			return best
		case n.Kind == yaml3.MappingNode:
			k, v := mappingEntry(n, key)
			if k == nil {
				return best
			}
			best, n = k, v
		default:
			return best
		}
	}
	return best
}

// document is a parsed file's top node.
func document(n *yaml3.Node) *yaml3.Node {
	if n.Kind == yaml3.DocumentNode && len(n.Content) == 1 {
		return n.Content[0]
	}
	return n
}

// mappingValue is the value of key in mapping n (nil if none).
func mappingValue(n *yaml3.Node, key string) *yaml3.Node {
	_, v := mappingEntry(n, key)
	return v
}

// mappingEntry is key's key and value nodes in mapping n (nils if none).
func mappingEntry(n *yaml3.Node, key string) (*yaml3.Node, *yaml3.Node) {
	if n == nil || n.Kind != yaml3.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}
