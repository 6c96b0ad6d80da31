package drain_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/selftaint/selftaint/agent/testcp"
)

// shared is the control plane of every test here: kube-controller-manager
// (the ReplicaSet, StatefulSet and DaemonSet controllers recreate pods;
// the disruption controller keeps PodDisruptionBudgets' status, which the
// Eviction API enforces) and kube-scheduler (places the pods a drain
// moves). Each test keeps to virtual nodes labelled with a group of its
// own, and to a namespace of its own. The controller manager may write as
// fast as a drain of a hundred pods needs.
var shared = testcp.NewShared(testcp.Options{
	ControllerManager:     true,
	Scheduler:             true,
	ControllerManagerArgs: []string{"--kube-api-qps=200", "--kube-api-burst=400"},
})

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
