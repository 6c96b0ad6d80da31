package hardware

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/selftaint/selftaint/probes"
)

// loadFixture expands testdata/<name>.txtar into a fresh host root and
// returns it. sysfs names PCI devices by address ("0000:3b:00.0"), and a
// colon may not appear in a file name inside a Go module zip, so the trees
// are kept as text (as node_exporter keeps its sys.ttar) rather than as
// files under testdata.
//
// The format is txtar's: a free-text comment, then sections each opened by
// a line "-- path --" and holding the file's lines. "-- path -> target --"
// makes a symlink, and "-- path/ --" an empty directory.
func loadFixture(t *testing.T, name string) probes.Host {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".txtar"))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	root := t.TempDir()
	var (
		file    string // path of the open section, "" before the first
		content strings.Builder
	)
	flush := func() {
		if file == "" {
			return
		}
		path := filepath.Join(root, file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		header, isHeader := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "-- ")
		header, closed := strings.CutSuffix(header, " --")
		if !isHeader || !closed {
			if file != "" {
				content.WriteString(line)
			}
			continue
		}
		flush()
		file = ""
		content.Reset()
		path := filepath.Join(root, filepath.FromSlash(header))
		switch link, target, isLink := strings.Cut(header, " -> "); {
		case isLink:
			path = filepath.Join(root, filepath.FromSlash(link))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		case strings.HasSuffix(header, "/"):
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			file = filepath.FromSlash(header)
		}
	}
	flush()
	return probes.Host{Root: root}
}

func TestLoadFixture(t *testing.T) {
	host := loadFixture(t, "pci-mixed")
	tests := []struct{ path, want string }{
		{"/sys/bus/pci/devices/0000:3b:00.0/vendor", "0x10ee\n"},
		{"/sys/bus/pci/devices/0000:af:00.0/class", "0x030200\n"},
		// Through the symlink, as in real sysfs.
		{"/sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n"},
	}
	for _, tt := range tests {
		got, err := os.ReadFile(host.Path(tt.path))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s = %q, %v, want %q", tt.path, got, err, tt.want)
		}
	}
	if fi, err := os.Lstat(host.Sys("bus", "pci", "devices", "0000:00:00.0")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("0000:00:00.0: got %v, %v, want a symlink", fi, err)
	}
	if fi, err := os.Stat(loadFixture(t, "pci-empty").Sys("bus", "pci", "devices")); err != nil || !fi.IsDir() {
		t.Errorf("pci-empty devices: got %v, %v, want an empty directory", fi, err)
	}
}
