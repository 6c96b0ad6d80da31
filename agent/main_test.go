package agent_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/selftaint/selftaint/agent/testcp"
)

// shared is the control plane of every test here that needs no fresh one:
// each keeps to a Node (and, for the fleet's objects, a namespace) of its
// own, so they run in parallel on one etcd and kube-apiserver. Tests that
// stop the API server or need other components start their own.
var shared = testcp.NewShared(testcp.Options{})

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the shared control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
