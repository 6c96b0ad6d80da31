// Package disk is selftaint's disk probe. It exists so a node whose root,
// kubelet or container-runtime filesystem is filling up (in bytes or in
// inodes) is tainted before image pulls, container writes and the kubelet's
// own state start failing. It checks each filesystem once, however many of
// the configured paths live on it.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/selftaint/selftaint/probes"
)

// Name is the disk probe's name.
const Name = "disk"

// Reasons the disk probe reports.
const (
	// ReasonDiskOK: every filesystem has enough free space and inodes.
	ReasonDiskOK = "DiskOK"
	// ReasonLowDiskSpace: some filesystem's free space is below FreeBelow.
	ReasonLowDiskSpace = "LowDiskSpace"
	// ReasonLowInodes: some filesystem's free inodes are below
	// InodesFreeBelow (and no filesystem is low on space).
	ReasonLowInodes = "LowInodes"
	// ReasonReadError: a path is missing or its filesystem unreadable.
	ReasonReadError = probes.ReasonReadError
)

// DefaultPaths returns the host paths checked when Config.Paths is empty:
// the root filesystem always, the kubelet's and containerd's state
// directories when they exist on the host.
func DefaultPaths() []string {
	return []string{"/", "/var/lib/kubelet", "/var/lib/containerd"}
}

// Config says which filesystems to check and when they are full. Zero
// thresholds disable their check.
type Config struct {
	// Paths are absolute host paths whose filesystems are checked. Every
	// one must exist. Empty means DefaultPaths, of which only "/" must.
	Paths []string
	// FreeBelow flags a filesystem whose space available to unprivileged
	// users is below it: a percentage of its size, or bytes.
	FreeBelow probes.Threshold
	// InodesFreeBelow flags a filesystem whose free inodes are below it: a
	// percentage of its inodes, or a count (a whole number). Filesystems that report no
	// inode total (btrfs, some overlays) are not checked.
	InodesFreeBelow probes.Threshold
}

// Validate checks the thresholds and that paths are absolute.
// A problem is a *probes.ConfigError naming each field.
func (c Config) Validate() error {
	var errs []probes.FieldError
	if err := c.FreeBelow.Validate(); err != nil {
		errs = append(errs, probes.FieldError{Field: "FreeBelow", Detail: err.Error()})
	}
	if err := c.InodesFreeBelow.ValidateCount(math.MaxUint64, ""); err != nil {
		errs = append(errs, probes.FieldError{Field: "InodesFreeBelow", Detail: err.Error()})
	}
	for i, p := range c.Paths {
		if !filepath.IsAbs(p) {
			errs = append(errs, probes.FieldError{Field: fmt.Sprintf("Paths[%d]", i), Detail: fmt.Sprintf("%q is not an absolute path on the host", p)})
		}
	}
	return probes.NewConfigError(Name, errs)
}

// Usage is what statfs(2) says about the filesystem holding a path.
type Usage struct {
	TotalBytes uint64
	// FreeBytes is the space available to unprivileged users (f_bavail),
	// which excludes the blocks reserved for root.
	FreeBytes   uint64
	TotalInodes uint64
	FreeInodes  uint64
	// Device identifies the filesystem (stat's st_dev). Paths with the same
	// non-zero Device are on one filesystem and checked once; 0 means
	// unknown and is never merged.
	Device uint64
}

// Probe is the disk probe. It is safe for concurrent use once configured.
type Probe struct {
	// Statfs returns the usage of the filesystem holding path, a path as
	// this process sees it (under the host root, symlinks resolved). It
	// defaults to statfs(2) and stat(2); tests replace it. Set it before
	// the probe first runs. A statfs on a hung network filesystem blocks;
	// the runner's timeout reports that.
	Statfs func(path string) (Usage, error)

	cfg   Config
	paths []string // cleaned, deduplicated Config.Paths; nil means defaults
	host  probes.Host
}

// New returns a disk probe that reads the host under host.Root.
func New(cfg Config, host probes.Host) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Probe{Statfs: statfs, cfg: cfg, host: host}
	seen := map[string]bool{}
	for _, path := range cfg.Paths {
		path = filepath.Clean(path)
		if !seen[path] {
			seen[path] = true
			p.paths = append(p.paths, path)
		}
	}
	return p, nil
}

// Name returns "disk".
func (p *Probe) Name() string { return Name }

// filesystem is one filesystem found, under the first path that led to it.
type filesystem struct {
	path  string
	also  []string // other configured paths on the same filesystem
	usage Usage
}

func (f *filesystem) label() string {
	if len(f.also) == 0 {
		return f.path
	}
	return fmt.Sprintf("%s (also %s)", f.path, strings.Join(f.also, ", "))
}

// Probe checks every path's filesystem once.
func (p *Probe) Probe(ctx context.Context) probes.Result {
	var (
		filesystems []*filesystem
		byDevice    = map[uint64]*filesystem{}
		readErrs    []string
	)
	for _, t := range p.pathsToCheck() {
		path := t.path
		u, err := p.usage(t)
		if err != nil {
			readErrs = append(readErrs, fmt.Sprintf("cannot read %s: %v", path, err))
			continue
		}
		if f := byDevice[u.Device]; f != nil && u.Device != 0 {
			f.also = append(f.also, path)
			continue
		}
		f := &filesystem{path: path, usage: u}
		filesystems = append(filesystems, f)
		byDevice[u.Device] = f
	}

	var (
		readings                    []probes.Reading
		summaries, spaceLow, inoLow []string
	)
	for _, f := range filesystems {
		u, label := f.usage, f.label()
		if len(f.also) > 0 {
			readings = append(readings, probes.Reading{Name: f.path + " also", Value: strings.Join(f.also, ", ")})
		}
		if u.TotalBytes == 0 {
			readings = append(readings, probes.Reading{Name: f.path + " free", Value: "size not reported"})
		} else {
			free, total := float64(u.FreeBytes), float64(u.TotalBytes)
			desc := fmt.Sprintf("%s (%.1f%% of %s)", probes.FormatBytes(free), free/total*100, probes.FormatBytes(total))
			readings = append(readings, probes.Reading{Name: f.path + " free", Value: desc})
			what := fmt.Sprintf("free space on %s %s", label, desc)
			if t := p.cfg.FreeBelow; !t.IsZero() && free < t.Of(total) {
				spaceLow = append(spaceLow, fmt.Sprintf("%s is below %s", what, probes.FormatThreshold(t)))
			} else {
				summaries = append(summaries, what)
			}
		}
		if u.TotalInodes == 0 {
			readings = append(readings, probes.Reading{Name: f.path + " inodes free", Value: "not reported"})
		} else {
			free, total := float64(u.FreeInodes), float64(u.TotalInodes)
			desc := fmt.Sprintf("%d (%.1f%% of %d)", u.FreeInodes, free/total*100, u.TotalInodes)
			readings = append(readings, probes.Reading{Name: f.path + " inodes free", Value: desc})
			if t := p.cfg.InodesFreeBelow; !t.IsZero() && free < t.Of(total) {
				inoLow = append(inoLow, fmt.Sprintf("free inodes on %s %s is below %s", label, desc, formatCount(t)))
			}
		}
	}

	switch {
	case len(spaceLow)+len(inoLow) > 0:
		reason := ReasonLowDiskSpace
		if len(spaceLow) == 0 {
			reason = ReasonLowInodes
		}
		// Read errors elsewhere do not hide a problem we did see.
		msg := strings.Join(append(append(spaceLow, inoLow...), readErrs...), "; ")
		return probes.Result{Status: probes.StatusProblem, Reason: reason, Message: msg, Readings: readings}
	case len(readErrs) > 0:
		return probes.Result{Status: probes.StatusUnknown, Reason: ReasonReadError, Message: strings.Join(readErrs, "; "), Readings: readings}
	}
	msg := strings.Join(summaries, "; ")
	if msg == "" {
		msg = "no filesystem reports its size"
	}
	return probes.Result{Status: probes.StatusOK, Reason: ReasonDiskOK, Message: msg, Readings: readings}
}

// target is a path to check and what resolving it on the host gave: each
// path is resolved once a run.
type target struct {
	path     string
	resolved string
	err      error
}

// pathsToCheck returns the configured paths, or the default paths that
// exist ("/" always), each resolved.
func (p *Probe) pathsToCheck() []target {
	var targets []target
	if p.paths != nil {
		for _, path := range p.paths {
			resolved, err := p.host.Resolve(path)
			targets = append(targets, target{path: path, resolved: resolved, err: err})
		}
		return targets
	}
	for i, path := range DefaultPaths() {
		resolved, err := p.host.Resolve(path)
		if i > 0 && errors.Is(err, fs.ErrNotExist) {
			continue // not a kubelet node, or another runtime
		}
		targets = append(targets, target{path: path, resolved: resolved, err: err})
	}
	return targets
}

// usage statfs-es a resolved host path.
func (p *Probe) usage(t target) (Usage, error) {
	if t.err != nil {
		return Usage{}, t.err
	}
	u, err := p.Statfs(t.resolved)
	if err != nil {
		return Usage{}, fmt.Errorf("reading filesystem usage: %w", err)
	}
	return u, nil
}

// formatCount formats an inode threshold: "5%" or "1000".
func formatCount(t probes.Threshold) string {
	if t.Percent {
		return t.String()
	}
	return strconv.FormatFloat(t.Value, 'f', -1, 64)
}
