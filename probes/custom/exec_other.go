//go:build !linux

package custom

import (
	"context"
	"errors"
)

// execPlugin needs process groups and waitid(2); custom checks run on
// Linux only.
func execPlugin(ctx context.Context, spec execSpec) (execResult, error) {
	return execResult{}, errors.New("custom checks run on Linux only")
}
