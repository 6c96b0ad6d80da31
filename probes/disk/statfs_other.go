//go:build !linux

package disk

import (
	"errors"
	"fmt"
)

// statfs is the default Probe.Statfs; selftaint reads filesystems only on
// Linux.
func statfs(path string) (Usage, error) {
	return Usage{}, fmt.Errorf("statfs %s: %w", path, errors.ErrUnsupported)
}
