// Package deploy holds selftaint's Kubernetes manifests; its tests apply them to a real control plane.
//
// deploy/ is selftaint's namespace (namespace.yaml), the node agent
// (ServiceAccount, RBAC, ConfigMap, DaemonSet and the
// ValidatingAdmissionPolicy that confines each agent to its own Node) and
// the coordinator (coordinator.yaml: its ServiceAccount, RBAC, Deployment
// and PodDisruptionBudget; coordinator-policy.yaml: the policy that confines
// it to its own Leases and guard; coordinator-drain-policy.yaml: the
// policies that confine its Node and pod writes to what a drain does),
// applied with `kubectl apply -k deploy/`. deploy/virtual/ is the separate,
// optional virtual-node simulator (`kubectl apply -k deploy/virtual/`), and
// deploy/drain-force/ the opt-in pod deletion of forced drains.
// deploy/kernel-log/ is an opt-in kustomize component over deploy/ that
// turns the kernel log monitor on (a privileged, root agent container with
// /dev/kmsg mounted, and NPD's kernel-monitor.json and
// readonly-monitor.json in its config). deploy/events-in-default/ holds no
// objects but a transformer that a `namespace:` overlay of deploy/ lists
// under `transformers:`, to keep the Events Roles in "default", where the
// Events about Nodes must be created. deploy/drills/ holds no manifests to
// apply: it is the example drills (`selftaint drill FILE`, `make demo` among
// them), which cmd/selftaint's tests run.
//
// The package has no code. Its tests decode every manifest strictly into the
// typed API objects, check that each kustomization lists exactly the files
// beside it, create everything on a real etcd and kube-apiserver, and run
// the agent, the coordinator and the virtual nodes under the service
// accounts' own RBAC to prove the permissions are enough and no more, and
// that the admission policies allow the agent's and the coordinator's
// writes and deny the rest.
package deploy
