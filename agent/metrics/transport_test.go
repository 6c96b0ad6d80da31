package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestParseRequest(t *testing.T) {
	const apply = "application/apply-patch+yaml"
	tests := []struct {
		method, path string
		watch        bool
		contentType  string
		want         RequestInfo
	}{
		{"GET", "/api/v1/nodes", false, "", RequestInfo{"list", "nodes", ""}},
		{"GET", "/api/v1/nodes", true, "", RequestInfo{"watch", "nodes", ""}},
		{"GET", "/api/v1/watch/nodes", false, "", RequestInfo{"watch", "nodes", ""}},
		{"GET", "/api/v1/nodes/n1", false, "", RequestInfo{"get", "nodes", ""}},
		{"GET", "/api/v1/nodes/n1/status", false, "", RequestInfo{"get", "nodes", "status"}},
		{"PATCH", "/api/v1/nodes/n1", false, "application/merge-patch+json", RequestInfo{"patch", "nodes", ""}},
		{"PATCH", "/api/v1/nodes/n1", false, "application/json-patch+json", RequestInfo{"patch", "nodes", ""}},
		{"PATCH", "/api/v1/nodes/n1/status", false, apply, RequestInfo{"apply", "nodes", "status"}},
		{"PUT", "/api/v1/nodes/n1/status", false, "application/json", RequestInfo{"update", "nodes", "status"}},
		{"POST", "/api/v1/namespaces/default/events", false, "application/json", RequestInfo{"create", "events", ""}},
		{"PATCH", "/api/v1/namespaces/default/events/e.123", false, "application/strategic-merge-patch+json", RequestInfo{"patch", "events", ""}},
		{"GET", "/api/v1/namespaces/kube-system/pods", false, "", RequestInfo{"list", "pods", ""}},
		{"GET", "/api/v1/namespaces/kube-system", false, "", RequestInfo{"get", "namespaces", ""}},
		{"GET", "/api/v1/namespaces", false, "", RequestInfo{"list", "namespaces", ""}},
		{"DELETE", "/api/v1/nodes/n1", false, "", RequestInfo{"delete", "nodes", ""}},
		{"DELETE", "/api/v1/namespaces/ns/pods", false, "", RequestInfo{"deletecollection", "pods", ""}},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", false, "application/json", RequestInfo{"update", "leases.coordination.k8s.io", ""}},
		{"POST", "/api/v1/namespaces/ns/pods/p/eviction", false, "application/json", RequestInfo{"create", "pods", "eviction"}},
		{"GET", "/apis/events.k8s.io/v1/watch/namespaces/ns/events", false, "", RequestInfo{"watch", "events.events.k8s.io", ""}},
		// Paths naming no resource: discovery, version, health.
		{"GET", "/api", false, "", RequestInfo{"get", "", ""}},
		{"GET", "/api/v1", false, "", RequestInfo{"get", "", ""}},
		{"GET", "/apis/coordination.k8s.io/v1", false, "", RequestInfo{"get", "", ""}},
		{"GET", "/apis/coordination.k8s.io", false, "", RequestInfo{"get", "", ""}},
		{"GET", "/version", false, "", RequestInfo{"get", "", ""}},
		{"GET", "/", false, "", RequestInfo{"get", "", ""}},
	}
	for _, tt := range tests {
		got := ParseRequest(tt.method, tt.path, tt.watch, tt.contentType)
		if got != tt.want {
			t.Errorf("ParseRequest(%s %s watch=%v %q) = %+v, want %+v", tt.method, tt.path, tt.watch, tt.contentType, got, tt.want)
		}
	}
}

// TestWrapTransport sends requests through the instrumented transport to a
// server answering 200, 409 and nothing at all, and checks the counters.
func TestWrapTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/conflict") {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	m, err := New(reg, BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: m.WrapTransport(http.DefaultTransport)}
	for _, path := range []string{"/api/v1/nodes?watch=true", "/api/v1/nodes/n1", "/api/v1/nodes/conflict"} {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := c.Get("http://127.0.0.1:1/api/v1/nodes/n1"); err == nil {
		t.Fatal("request to a closed port succeeded")
	}
	for _, tt := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"watch", "nodes", "", "200"}, 1},
		{[]string{"get", "nodes", "", "200"}, 1},
		{[]string{"get", "nodes", "", "409"}, 1},
		{[]string{"get", "nodes", "", "error"}, 1},
	} {
		if got := value(t, reg, "selftaint_api_requests_total", "verb", tt.labels[0], "resource", tt.labels[1], "subresource", tt.labels[2], "code", tt.labels[3]); got != tt.want {
			t.Errorf("selftaint_api_requests_total%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if got := value(t, reg, "selftaint_api_conflicts_total"); got != 1 {
		t.Errorf("selftaint_api_conflicts_total = %v, want 1", got)
	}
	if got := len(series(t, reg, "selftaint_api_request_duration_seconds")); got != 2 { // watch nodes, get nodes
		t.Errorf("%d latency series, want 2", got)
	}
}

// series returns the series of the metric family name in reg.
func series(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// value returns the value of the counter or gauge name{labels...} in reg,
// failing the test when there is no such series.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		match := 0
		for _, l := range m.GetLabel() {
			for i := 0; i+1 < len(labels); i += 2 {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					match++
				}
			}
		}
		if match != len(labels)/2 {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}
