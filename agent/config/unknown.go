package config

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// unknownFields returns the full paths (e.g. "probes.memory.intervall") of
// keys in the YAML document that no field of Config declares. The JSON
// decoder only names the last path element, which is not enough to find a
// typo in a nested block.
func unknownFields(doc []byte) []string {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return nil
	}
	var out []string
	walkUnknown(v, reflect.TypeOf(Config{}), nil, &out)
	sort.Strings(out)
	return out
}

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func walkUnknown(v any, t reflect.Type, path *field.Path, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return // a leaf with its own syntax (Duration, Threshold)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		for k, child := range m {
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, childPath(path, k).String())
				continue
			}
			walkUnknown(child, ft, childPath(path, k), out)
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return
		}
		for i, item := range list {
			p := field.NewPath("[]").Index(i)
			if path != nil {
				p = path.Index(i)
			}
			walkUnknown(item, t.Elem(), p, out)
		}
	}
}

func childPath(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

// collectFields maps JSON names to field types, descending into inlined
// embedded structs.
func collectFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			collectFields(f.Type, into)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if f.IsExported() {
			into[name] = f.Type
		}
	}
}
