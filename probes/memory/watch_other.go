//go:build !linux

package memory

import (
	"context"
	"errors"
	"time"
)

// watchPSI needs Linux's PSI triggers; elsewhere the probe runs only on its
// interval.
func watchPSI(context.Context, string, time.Duration, time.Duration, func(), func()) error {
	return errors.New("PSI triggers need Linux")
}
