package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// vkLogger is virtual-kubelet's Logger over slog. Unlike virtual-kubelet's
// own slog adapter it writes an error as its message only: virtual-kubelet
// wraps errors with github.com/pkg/errors, whose %+v (what slog's text
// handler prints) is the message and a stack trace. It takes any
// arguments (virtual-kubelet logs some errors as the message itself), and
// it logs what virtual-kubelet reports as an error or warning but is the
// ordinary course of things at debug (see vkLevel).
type vkLogger struct {
	log *slog.Logger
	err error // the error WithError attached, if any
}

var _ vklog.Logger = vkLogger{}

func newVKLogger(log *slog.Logger) vkLogger { return vkLogger{log: log} }

// vkLevel is the level a virtual-kubelet log line at level, with message
// msg and error err, is logged at. Its pod workers log every failed try as
// an error and its requeue as a warning, and retry; these are expected and
// go to debug:
//   - a conflict (409): a status written from a cache one version behind
//     the pod (someone else changed it meanwhile, say the Eviction API or
//     the node lifecycle controller); the retry reads the pod again. When
//     the retries are spent ("maximum retries") it stays visible as a
//     warning.
//   - not found (404): the pod was deleted meanwhile; there is nothing
//     left to write.
//   - context cancelled: the node is stopping.
//   - forgetting a queue item "as told to forget while in progress": the
//     pod was deleted while its item was worked on.
//   - "Not deleting pod because ... not found": virtual-kubelet's own
//     removal of a stopped pod found it removed already (DeletePod removes
//     it; the error is in the message).
//
// Anything else keeps its level.
func vkLevel(level slog.Level, msg string, err error) slog.Level {
	if level <= slog.LevelDebug {
		return level
	}
	if strings.Contains(msg, "as told to forget while in progress") ||
		strings.HasPrefix(msg, "Not deleting pod because") && strings.HasSuffix(msg, "not found") {
		return slog.LevelDebug
	}
	switch {
	case err == nil:
		return level
	case errors.Is(err, context.Canceled), apierrors.IsNotFound(err):
		return slog.LevelDebug
	case apierrors.IsConflict(err):
		if strings.Contains(err.Error(), "maximum retries") {
			return min(level, slog.LevelWarn)
		}
		return slog.LevelDebug
	}
	return level
}

func (l vkLogger) emit(level slog.Level, msg func() string) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return // vkLevel only lowers levels
	}
	m := msg()
	level = vkLevel(level, m, l.err)
	if !l.log.Enabled(ctx, level) {
		return
	}
	if l.err != nil {
		l.log.Log(ctx, level, m, "error", l.err.Error())
		return
	}
	l.log.Log(ctx, level, m)
}

// vkFatal is the level of virtual-kubelet's Fatal: slog has none; it is
// virtual-kubelet's own adapter's.
const vkFatal = slog.Level(12)

func (l vkLogger) Debug(args ...any) {
	l.emit(slog.LevelDebug, func() string { return fmt.Sprint(args...) })
}
func (l vkLogger) Debugf(format string, args ...any) {
	l.emit(slog.LevelDebug, func() string { return fmt.Sprintf(format, args...) })
}
func (l vkLogger) Info(args ...any) {
	l.emit(slog.LevelInfo, func() string { return fmt.Sprint(args...) })
}
func (l vkLogger) Infof(format string, args ...any) {
	l.emit(slog.LevelInfo, func() string { return fmt.Sprintf(format, args...) })
}
func (l vkLogger) Warn(args ...any) {
	l.emit(slog.LevelWarn, func() string { return fmt.Sprint(args...) })
}
func (l vkLogger) Warnf(format string, args ...any) {
	l.emit(slog.LevelWarn, func() string { return fmt.Sprintf(format, args...) })
}
func (l vkLogger) Error(args ...any) {
	l.emit(slog.LevelError, func() string { return fmt.Sprint(args...) })
}
func (l vkLogger) Errorf(format string, args ...any) {
	l.emit(slog.LevelError, func() string { return fmt.Sprintf(format, args...) })
}

// Fatal logs at vkFatal; virtual-kubelet's library code does not call it,
// and selftaint exits only from main.
func (l vkLogger) Fatal(args ...any) { l.emit(vkFatal, func() string { return fmt.Sprint(args...) }) }
func (l vkLogger) Fatalf(format string, args ...any) {
	l.emit(vkFatal, func() string { return fmt.Sprintf(format, args...) })
}

func (l vkLogger) WithField(key string, val any) vklog.Logger {
	return vkLogger{log: l.log.With(key, val), err: l.err}
}

func (l vkLogger) WithFields(f vklog.Fields) vklog.Logger {
	args := make([]any, 0, 2*len(f))
	for _, k := range slices.Sorted(maps.Keys(f)) {
		args = append(args, k, f[k])
	}
	return vkLogger{log: l.log.With(args...), err: l.err}
}

func (l vkLogger) WithError(err error) vklog.Logger { return vkLogger{log: l.log, err: err} }
