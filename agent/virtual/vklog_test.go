package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	pkgerrors "github.com/pkg/errors"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Errors as virtual-kubelet v1.13.0's pod controller and queue build them.
var (
	podsGR   = schema.GroupResource{Resource: "pods"}
	conflict = apierrors.NewConflict(podsGR, "p", errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	// node/pod.go updatePodStatus
	statusConflict = pkgerrors.Wrap(conflict, "error while updating pod status in kubernetes")
	statusGone     = pkgerrors.Wrap(apierrors.NewNotFound(podsGR, "p"), "error while updating pod status in kubernetes")
	statusInvalid  = pkgerrors.Wrap(apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p",
		field.ErrorList{field.Invalid(field.NewPath("metadata", "deletionGracePeriodSeconds"), 30, "field is immutable")}),
		"error while updating pod status in kubernetes")
	// internal/queue/queue.go: retries spent
	errConflictGaveUp = fmt.Errorf("forgetting %q due to: %w", "ns/p", pkgerrors.Wrapf(statusConflict, "maximum retries (%d) reached", 20))
	// a request cut short when the node stops
	cancelled = pkgerrors.Wrap(&url.Error{Op: "Put", URL: "https://127.0.0.1/api/v1/namespaces/ns/pods/p/status", Err: context.Canceled}, "error while updating pod status in kubernetes")
)

func TestVKLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		msg   string
		err   error
		want  slog.Level
	}{
		{"status conflict, the try", slog.LevelError, "Error processing pod status update", statusConflict, slog.LevelDebug},
		{"status conflict, the requeue", slog.LevelWarn, `requeuing "ns/p" due to failed sync`, statusConflict, slog.LevelDebug},
		{"conflict, retries spent", slog.LevelError, "Error processing Queue item", errConflictGaveUp, slog.LevelWarn},
		{"pod gone", slog.LevelWarn, "Failed to update pod status", statusGone, slog.LevelDebug},
		{"node stopping", slog.LevelError, "Error processing pod status update", cancelled, slog.LevelDebug},
		{"forgotten while in progress", slog.LevelWarn, `forgetting "ns/p/uid" as told to forget while in progress`, nil, slog.LevelDebug},
		{"removed already", slog.LevelWarn, `Not deleting pod because pods "p" not found`, nil, slog.LevelDebug},
		{"not deleting a recreated pod", slog.LevelWarn, "Not deleting pod because remote pod has different UID", nil, slog.LevelWarn},
		{"invalid status: a real error", slog.LevelError, "Error processing pod status update", statusInvalid, slog.LevelError},
		{"provider error", slog.LevelError, "Error processing Queue item", pkgerrors.Wrap(errors.New("boom"), "failed to delete pod"), slog.LevelError},
		{"error without an error value", slog.LevelError, "Force deleting pod in running state", nil, slog.LevelError},
		{"warning without an error value", slog.LevelWarn, "enqueuePodStatusUpdate proceeding with unsynced cache", nil, slog.LevelWarn},
		{"debug stays debug", slog.LevelDebug, "Updated pod status in kubernetes", statusConflict, slog.LevelDebug},
		{"info with a conflict", slog.LevelInfo, "x", statusConflict, slog.LevelDebug},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vkLevel(tc.level, tc.msg, tc.err); got != tc.want {
				t.Errorf("vkLevel(%v, %q, %v) = %v, want %v", tc.level, tc.msg, tc.err, got, tc.want)
			}
		})
	}
}

// TestVKLogger checks what the adapter writes through a text handler: an
// error's message without its stack trace, the expected ones at debug,
// arguments that are not strings, fields.
func TestVKLogger(t *testing.T) {
	var b strings.Builder
	var l vklog.Logger = newVKLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l = l.WithField("queue", "syncPodStatusFromProvider")

	l.WithError(statusConflict).Error("Error processing pod status update")
	if b.Len() != 0 {
		t.Errorf("an expected conflict was written at info: %s", b.String())
	}
	l.WithError(statusInvalid).Error("Error processing pod status update")
	l.Warn(pkgerrors.Errorf("invalid resource key: %q", "a/b/c")) // not a string: virtual-kubelet's adapter panics
	l.WithFields(vklog.Fields{"b": 2, "a": 1}).Infof("synced %d pods", 3)
	got := b.String()
	for _, want := range []string{
		`level=ERROR msg="Error processing pod status update" queue=syncPodStatusFromProvider error="error while updating pod status in kubernetes: Pod \"p\" is invalid: metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable"`,
		`level=WARN msg="invalid resource key: \"a/b/c\"" queue=syncPodStatusFromProvider`,
		`level=INFO msg="synced 3 pods" queue=syncPodStatusFromProvider a=1 b=2`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks\n%s\ngot\n%s", want, got)
		}
	}
	if strings.Contains(got, ".go:") || strings.Contains(got, `\n\t`) {
		t.Errorf("log has a stack trace:\n%s", got)
	}

	b.Reset()
	debug := newVKLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	debug.WithError(statusConflict).Error("Error processing pod status update")
	if want := `level=DEBUG msg="Error processing pod status update" error="error while updating pod status in kubernetes: Operation cannot be fulfilled on pods \"p\": the object has been modified`; !strings.Contains(b.String(), want) {
		t.Errorf("debug log lacks\n%s\ngot\n%s", want, b.String())
	}
}
