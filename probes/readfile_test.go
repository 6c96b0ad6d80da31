package probes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestReadFileIsOSReadFile: ReadFile returns what os.ReadFile returns, data
// and errors alike, for files around its buffer's size, an empty file, a
// missing file and a directory.
func TestReadFileIsOSReadFile(t *testing.T) {
	dir := t.TempDir()
	paths := map[string]string{
		"missing":   filepath.Join(dir, "missing"),
		"directory": dir,
		"procfs":    "/proc/self/cmdline",
	}
	for _, size := range []int{0, 1, 4095, 4096, 4097, 8192, 100000} {
		p := filepath.Join(dir, fmt.Sprintf("%d-bytes", size))
		data := bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1)[:size]
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		paths[p] = p
	}
	for name, p := range paths {
		t.Run(filepath.Base(name), func(t *testing.T) {
			want, wantErr := os.ReadFile(p)
			got, err := ReadFile(p)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("error %v, want %v", err, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("read %d bytes %.40q..., want %d bytes %.40q...", len(got), got, len(want), want)
			}
			var pe *fs.PathError
			if err != nil && !errors.As(err, &pe) {
				t.Errorf("error %T, want *fs.PathError", err)
			}
			if errors.Is(err, fs.ErrNotExist) != errors.Is(wantErr, fs.ErrNotExist) {
				t.Errorf("errors.Is(%v, fs.ErrNotExist) differs from os.ReadFile's", err)
			}
		})
	}
}
