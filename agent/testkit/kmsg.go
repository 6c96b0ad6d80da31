package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/selftaint/selftaint/agent"
)

// Kmsg stands in for /dev/kmsg in benchmarks, for any number of readers at
// once: each reader (selftaint through checks.kmsgPath, node-problem-
// detector through KmsgNamespace) reads a FIFO of its own, and Write puts
// the same record, with the same sequence number and time stamp, in every
// FIFO. Each FIFO is held open for writing (as the kernel holds its log),
// so a reader blocks in read as on /dev/kmsg and never sees end of file.
// A FIFO hands each record to one reader: a process that opens its FIFO
// twice (two kmsg files) gets each record in only one of them.
type Kmsg struct {
	boot time.Time

	mu    sync.Mutex // guards seq and fifos
	seq   int
	fifos []*os.File
}

// NewKmsg stamps its records against boot: the time the readers take
// for the kernel's boot (SysinfoBoot for NPD's and the host's).
func NewKmsg(boot time.Time) *Kmsg { return &Kmsg{boot: boot} }

// SysinfoBoot is the boot NPD's kmsg reader takes: now less sysinfo's
// uptime.
func SysinfoBoot(t testing.TB) time.Time {
	t.Helper()
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatalf("sysinfo: %v", err)
	}
	return time.Now().Add(-time.Duration(si.Uptime) * time.Second)
}

// FIFO makes a FIFO at path with permissions perm (others may need to
// read it: a reader running as another user), which gets every record
// from now on, and returns path. It is closed at the end of the test.
func (k *Kmsg) FIFO(t testing.TB, path string, perm os.FileMode) string {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo %s: %v", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	// O_RDWR: opening does not wait for a reader, and the FIFO always has
	// a writer.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fifos = append(k.fifos, f)
	return path
}

// Write logs msg as the kernel's next record, stamped now, in every FIFO
// (the first one in turn, so no reader is always served first), and
// returns the time it was written.
func (k *Kmsg) Write(t testing.TB, msg string) time.Time {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	now := time.Now()
	rec := fmt.Sprintf("3,%d,%d,-;%s\n", k.seq, now.Sub(k.boot).Microseconds(), msg)
	for i := range k.fifos {
		f := k.fifos[(k.seq+i)%len(k.fifos)]
		if _, err := f.WriteString(rec); err != nil {
			t.Fatalf("writing to the kmsg FIFO %s: %v", f.Name(), err)
		}
	}
	return now
}

// KmsgNamespace is argv run in a mount namespace of its own whose
// /dev/kmsg is fifo (a bind mount), for node-problem-detector, whose kmsg
// reader opens /dev/kmsg by that name. It needs root and unshare(1).
func KmsgNamespace(fifo string, argv ...string) []string {
	return append([]string{"unshare", "-m", "--propagation", "private",
		"sh", "-c", `mount --bind "$0" /dev/kmsg && exec "$@"`, fifo}, argv...)
}

// RequestClear writes an operator's clear request for probe on node (what
// `selftaint gpu clear` and the fault CLI write), by who.
func RequestClear(t testing.TB, c kubernetes.Interface, node, probe, by string, targets ...string) {
	t.Helper()
	req, err := agent.ClearRequest{Targets: targets, RequestedAt: time.Now().UTC().Format(time.RFC3339Nano), By: by}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, agent.ClearAnnotation(probe), req)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("writing the clear request for %s on node %s: %v", probe, node, err)
	}
}

// FreePort is a TCP port on 127.0.0.1 free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Tail is the end of s, at most n bytes.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
