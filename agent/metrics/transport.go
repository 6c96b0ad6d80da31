package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RequestInfo is what a request to the Kubernetes API server is, for
// metric labels: never a name, namespace or UID, so the label sets stay few.
type RequestInfo struct {
	// Verb is the Kubernetes verb (get, list, watch, create, update, patch,
	// apply, delete, deletecollection), or the lower-case HTTP method for
	// a path that names no resource (discovery, /version, /healthz).
	Verb string
	// Resource is the resource, "resource.group" outside the core group;
	// empty for a path that names no resource.
	Resource string
	// Subresource is e.g. "status"; empty for the object itself.
	Subresource string
}

// ParseRequest derives a request's verb, resource and subresource from its
// method, URL path, whether its query asks for a watch, and its content
// type (server-side apply is a PATCH with an apply-patch content type).
func ParseRequest(method, path string, watch bool, contentType string) RequestInfo {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	var rest []string
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		rest = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		group, rest = seg[1], seg[3:]
	}
	if len(rest) > 0 && rest[0] == "watch" { // the deprecated /watch/ paths
		watch, rest = true, rest[1:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // a namespaced resource; "namespaces/NAME" alone is the namespace itself
	}
	if len(rest) == 0 || rest[0] == "" {
		return RequestInfo{Verb: strings.ToLower(method)}
	}
	info := RequestInfo{Resource: rest[0]}
	if group != "" {
		info.Resource += "." + group
	}
	named := len(rest) >= 2
	if len(rest) >= 3 {
		info.Subresource = rest[2]
	}
	info.Verb = verb(method, named, watch, contentType)
	return info
}

// verb maps an HTTP method on a resource path to the Kubernetes verb.
func verb(method string, named, watch bool, contentType string) string {
	switch method {
	case http.MethodGet:
		switch {
		case watch:
			return "watch"
		case named:
			return "get"
		}
		return "list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		if strings.HasPrefix(contentType, "application/apply-patch") {
			return "apply"
		}
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(method)
}

// apiMetrics count and time the requests to the API server; the agent's
// and the coordinator's metrics both have them.
type apiMetrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	conflicts prometheus.Counter
}

func newAPIMetrics() apiMetrics {
	return apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "api_requests_total",
			Help: "Requests to the Kubernetes API server, by verb, resource, subresource and HTTP code (\"error\" when no response came).",
		}, []string{"verb", "resource", "subresource", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "api_request_duration_seconds",
			Help:    "Latency of requests to the Kubernetes API server until the response headers (a watch: until it is established).",
			Buckets: prometheus.DefBuckets,
		}, []string{"verb", "resource", "subresource"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "api_conflicts_total",
			Help: "API responses 409 Conflict: a write raced another writer and is retried from a fresh read.",
		}),
	}
}

// WrapTransport instruments an API client's transport: use it as
// rest.Config.Wrap's function. Every request is counted by verb, resource,
// subresource and code, timed, and a 409 counted as a conflict.
func (m *Metrics) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, m: m.api, now: time.Now}
}

type roundTripper struct {
	next http.RoundTripper
	m    apiMetrics
	now  func() time.Time
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	w := req.URL.Query().Get("watch")
	info := ParseRequest(req.Method, req.URL.Path, w == "true" || w == "1", req.Header.Get("Content-Type"))
	start := r.now()
	resp, err := r.next.RoundTrip(req)
	r.m.duration.WithLabelValues(info.Verb, info.Resource, info.Subresource).Observe(r.now().Sub(start).Seconds())
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == http.StatusConflict {
			r.m.conflicts.Inc()
		}
	}
	r.m.requests.WithLabelValues(info.Verb, info.Resource, info.Subresource, code).Inc()
	return resp, err
}
