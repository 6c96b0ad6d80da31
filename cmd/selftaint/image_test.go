package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// makefileLDFlags returns the Makefile's SELFTAINT_LDFLAGS: how the release
// binary is linked (the Makefile says why each flag is there).
func makefileLDFlags(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SELFTAINT_LDFLAGS\s*:?=\s*(.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Makefile: no SELFTAINT_LDFLAGS line")
	}
	return strings.TrimSpace(string(m[1]))
}

// TestImageBuildsAsTheMakefile: the Dockerfile links the binary with the
// Makefile's flags (the memory figures in the README are taken on a `make
// build` binary) and installs it owned by the user it runs as, which the
// start-up memory shed needs (the kernel pages a file out only for its
// owner).
func TestImageBuildsAsTheMakefile(t *testing.T) {
	flags := makefileLDFlags(t)
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	docker := string(b)
	build := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=1 go build .*-ldflags "([^"]*)"`).FindStringSubmatch(docker)
	if build == nil {
		t.Fatal(`Dockerfile: no 'RUN CGO_ENABLED=1 go build ... -ldflags "..."' line`)
	}
	if !strings.HasPrefix(build[1], flags+" ") && build[1] != flags {
		t.Errorf("Dockerfile links with %q; the Makefile's SELFTAINT_LDFLAGS are %q", build[1], flags)
	}
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(docker)
	if user == nil {
		t.Fatal("Dockerfile: no USER line")
	}
	install := regexp.MustCompile(`(?m)^COPY --from=build (.*) /out/selftaint /usr/local/bin/selftaint$`).FindStringSubmatch(docker)
	if install == nil {
		t.Fatal("Dockerfile: no COPY of /out/selftaint to /usr/local/bin/selftaint")
	}
	if !strings.Contains(install[1], "--chown="+user[1]) {
		t.Errorf("Dockerfile installs the binary with %q, not owned by the image's USER %s: --shed-startup-memory would do nothing", install[1], user[1])
	}
	if !strings.Contains(install[1], "--chmod=0555") {
		t.Errorf("Dockerfile installs the binary with %q: want it read-only (--chmod=0555)", install[1])
	}
}
