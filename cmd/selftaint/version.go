package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/selftaint/selftaint/agent/metrics"
)

// version and revision are stamped at build time with
//
//	-ldflags "-X main.version=v1.2.3 -X main.revision=<commit>"
//
// (the Makefile's build target and the Dockerfile do). They are the only
// package-level variables: the linker can set nothing else. Everything else
// reads them once, through buildInfo, and passes the value down.
var (
	version  string
	revision string
)

// buildInfo is this binary's version, revision and Go version.
func buildInfo() metrics.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolveBuildInfo(version, revision, bi, runtime.Version())
}

// resolveBuildInfo prefers the stamped values; without them it falls back
// to what the Go toolchain recorded (the module version, vcs.revision), and
// then to "devel" and "unknown".
func resolveBuildInfo(version, revision string, bi *debug.BuildInfo, goVersion string) metrics.BuildInfo {
	out := metrics.BuildInfo{Version: version, Revision: revision, GoVersion: goVersion}
	if bi != nil {
		if out.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			out.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && out.Revision == "" {
				out.Revision = s.Value
			}
		}
	}
	if out.Version == "" {
		out.Version = "devel"
	}
	if out.Revision == "" {
		out.Revision = "unknown"
	}
	return out
}

// runVersion prints the version, revision and Go version.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("selftaint version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	b := buildInfo()
	_, err := fmt.Fprintf(stdout, "selftaint %s (revision %s, %s)\n", b.Version, b.Revision, b.GoVersion)
	return err
}
