package drill_test

import (
	"fmt"

	"github.com/selftaint/selftaint/taints/drill"
)

// A drill file: a GPU training job under a PodDisruptionBudget, one of
// whose nodes reports Xid 79 (GPU fallen off the bus) for five minutes.
func ExampleParse() {
	file := `apiVersion: selftaint.io/v1alpha1
kind: Drill
name: gpu-xid79
description: a GPU falls off the bus under a training job
cluster:
  pools:
  - name: gpu
    count: 4
    labels: {pool: gpu}
    capacity: {nvidia.com/gpu: 8}
workloads:
- file: train.yaml              # a StatefulSet "train" and its PDB
steps:
- name: xid79
  at: 10s
  fault: {nodes: [gpu-1], gpuXid: 79, for: 5m}
- waitFor: {nodes: [gpu-1], taint: {key: selftaint.io/gpu, effect: NoExecute}}
expect:
- ready: {workload: {kind: StatefulSet, name: train}, within: 2m, after: xid79}
- pdb: {name: train}
- evicted: {selector: app=train, after: xid79}
- noExecute: {atMost: 1}
- explain: {step: xid79}
`
	s, err := drill.Parse([]byte(file), "gpu-xid79.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range s.Steps {
		fmt.Printf("step %s: %s\n", st.Name, st.StepKind())
	}
	for i := range s.Expect {
		fmt.Println("expect:", drill.ExpectationName(&s.Expect[i]))
	}
	fmt.Println("timeout:", s.Timeout.Duration, "settle:", s.Settle.Duration)

	_, err = drill.Parse([]byte(`apiVersion: selftaint.io/v1alpha1
kind: Drill
name: typo
cluster: {pools: [{name: gpu, count: 1}]}
steps:
- fault: {nodes: [gpu-1], condtion: GPUHealthy, for: 1m}
expect:
- noExecute: {atMost: 1}
`), "typo.yaml")
	fmt.Println(err)
	// Output:
	// step xid79: fault
	// step step-2: waitFor
	// expect: ready StatefulSet/train within 2m after xid79
	// expect: pdb train never below its minimum
	// expect: evicted app=train after xid79
	// expect: at most 1 NoExecute node
	// expect: explain holds for xid79
	// timeout: 10m0s settle: 5s
	// typo.yaml: 2 errors:
	//   typo.yaml:6: steps[0].fault.condtion: unknown field (did you mean condition?)
	//   typo.yaml:6: steps[0].fault: exactly one of condition and gpuXid
}
