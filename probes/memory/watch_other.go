//go:build !linux

package memory

import (
	"context"
	"errors"
)

// watchPSI needs Linux's PSI triggers; elsewhere the probe runs only on its
// interval.
func watchPSI(context.Context, string, []psiTrigger, psiHooks) error {
	return errors.New("PSI triggers need Linux")
}
