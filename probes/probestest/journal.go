package probestest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// JournalEntry is one systemd journal entry for WriteJournal.
type JournalEntry struct {
	// Time is the entry's realtime timestamp; its monotonic timestamp is
	// the same number of microseconds, so entries of one boot sort alike
	// by either.
	Time time.Time
	// BootID is _BOOT_ID, in the journal's form (32 hex digits) or the
	// kernel's (a UUID with dashes).
	BootID string
	// Identifier is SYSLOG_IDENTIFIER.
	Identifier string
	// Message is MESSAGE, one line.
	Message string
}

// JournalRemote returns the systemd-journal-remote binary; without one the
// test fails under CI=true and is skipped otherwise (FailOrSkip).
func JournalRemote(t testing.TB) string {
	t.Helper()
	// Where Debian, Ubuntu and Fedora install it (package
	// systemd-journal-remote).
	journalRemotePaths := []string{"/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote"}
	for _, p := range journalRemotePaths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("systemd-journal-remote"); err == nil {
		return p
	}
	FailOrSkip(t, fmt.Sprintf("writing a journal needs systemd-journal-remote (apt-get install systemd-journal-remote; looked in %s and PATH)", strings.Join(journalRemotePaths, ", ")))
	return ""
}

// WriteJournal writes entries, in order, into the journal file path
// (created with its directory, or appended to) with systemd's own
// systemd-journal-remote reading them as Journal Export Format: the file is
// what journald's code writes, not a copy of its format.
func WriteJournal(t testing.TB, path string, entries ...JournalEntry) {
	t.Helper()
	bin := JournalRemote(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var export bytes.Buffer
	for _, e := range entries {
		if strings.ContainsAny(e.Message, "\n") || strings.ContainsAny(e.Identifier, "\n") {
			t.Fatalf("journal entry %+v: one line only (export's text fields)", e)
		}
		usec := e.Time.UnixMicro()
		fmt.Fprintf(&export, "__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n_BOOT_ID=%s\nSYSLOG_IDENTIFIER=%s\nMESSAGE=%s\n\n",
			usec, usec, strings.ReplaceAll(e.BootID, "-", ""), e.Identifier, e.Message)
	}
	cmd := exec.Command(bin, "--output="+path, "-")
	cmd.Stdin = &export
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s --output=%s -: %v: %s", bin, path, err, bytes.TrimSpace(out))
	}
}
