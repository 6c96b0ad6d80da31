package drill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/selftaint/selftaint/agent/config"
	tdrill "github.com/selftaint/selftaint/taints/drill"
)

// plan is what the drill knows before it creates anything: the agents'
// config (loaded from the file it wrote), the workloads' objects.
type plan struct {
	scenario   *tdrill.Scenario
	cfg        *config.Config
	configPath string // a temporary file holding cluster.config
	dir        string // the temporary directory holding it
	objects    []*unstructured.Unstructured
	// objectFields names, per object, where it came from
	// ("workloads[1] (web.yaml) document 2").
	objectFields []string
}

// errNoCoordinatorForRealNodes is why a coordinator step is refused on a
// drill without virtual nodes.
var errNoCoordinatorForRealNodes = errors.New("the drill runs no coordinator for real nodes (it kills or pauses only the coordinator it runs for its virtual nodes)")

// prepare checks what can be checked before anything is created and reads
// the config and the workloads. Every error is a *BadFileError, or a
// *ConfigFileError for cluster.config.
func prepare(s *tdrill.Scenario, opts Options) (*plan, error) {
	if err := checkCluster(s, opts.Existing); err != nil {
		return nil, err
	}
	// Before the temporary file: the errors name the drill file's lines.
	if err := CheckConfig(s, opts.File); err != nil {
		return nil, err
	}
	p := &plan{scenario: s}
	if err := p.loadConfig(s.Cluster.Config); err != nil {
		return nil, err
	}
	if err := p.readWorkloads(s.Workloads, filepath.Dir(opts.File)); err != nil {
		p.removeFiles()
		return nil, err
	}
	return p, nil
}

// checkCluster refuses what the drill cannot run: real nodes without an
// existing cluster, and a coordinator step where it runs no coordinator.
func checkCluster(s *tdrill.Scenario, existing bool) error {
	if s.Cluster.RealNodes != "" && !existing {
		return &BadFileError{Field: "cluster.realNodes", Err: errors.New("real nodes need an existing cluster (--kubeconfig)")}
	}
	runsCoordinator := len(s.Cluster.Pools) > 0 && (s.Cluster.Coordinator.Replicas == nil || *s.Cluster.Coordinator.Replicas > 0)
	for i, st := range s.Steps {
		if st.Coordinator != nil && !runsCoordinator {
			name := st.Name
			if name == "" {
				name = fmt.Sprintf("step-%d", i+1)
			}
			why := errNoCoordinatorForRealNodes
			if len(s.Cluster.Pools) > 0 {
				why = errors.New("cluster.coordinator.replicas is 0: the drill runs no coordinator to kill or pause")
			}
			return &BadFileError{Field: fmt.Sprintf("steps[%d].coordinator (step %q)", i, name), Err: why}
		}
	}
	return nil
}

// loadConfig writes cluster.config to a temporary file and loads it as the
// agents load theirs.
func (p *plan) loadConfig(text string) error {
	dir, err := os.MkdirTemp("", "selftaint-drill-")
	if err != nil {
		return fmt.Errorf("creating a temporary directory: %w", err)
	}
	p.dir = dir
	p.configPath = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p.configPath, []byte(text), 0o600); err != nil {
		p.removeFiles()
		return fmt.Errorf("writing the config: %w", err)
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil { // CheckConfig passed it: not reached
		p.removeFiles()
		return &BadFileError{Field: "cluster.config", Err: err}
	}
	p.cfg = cfg
	return nil
}

// removeFiles removes the temporary directory.
func (p *plan) removeFiles() {
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// readWorkloads decodes every manifest (several YAML documents each).
func (p *plan) readWorkloads(ws []tdrill.Workload, base string) error {
	for i, w := range ws {
		field := fmt.Sprintf("workloads[%d]", i)
		text := []byte(w.Manifest)
		if w.File != "" {
			path := w.File
			if !filepath.IsAbs(path) {
				path = filepath.Join(base, path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return &BadFileError{Field: field + ".file", Err: err}
			}
			text, field = b, field+" ("+w.File+")"
		}
		objs, err := decodeManifests(text)
		if err != nil {
			return &BadFileError{Field: field, Err: err}
		}
		for j, o := range objs {
			p.objects = append(p.objects, o)
			p.objectFields = append(p.objectFields, fmt.Sprintf("%s document %d", field, j+1))
		}
	}
	return nil
}

// decodeManifests reads the objects of a multi-document YAML (or JSON)
// text; empty documents are skipped.
func decodeManifests(text []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		switch {
		case o.GetAPIVersion() == "" || o.GetKind() == "":
			return nil, fmt.Errorf("document %d: apiVersion and kind are required", i)
		case o.GetName() == "":
			return nil, fmt.Errorf("document %d (%s): metadata.name is required", i, o.GetKind())
		}
		out = append(out, o)
	}
}
