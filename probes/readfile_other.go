//go:build !unix

package probes

import "os"

// ReadFile is os.ReadFile; on Unix it skips os.ReadFile's stat and poller
// registration.
func ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }
