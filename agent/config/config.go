// Package config reads selftaint's one configuration file (the ConfigMap in
// deploy/) into typed, validated settings. Decoding is strict, so a typo in a
// field name is an error instead of a silently ignored setting, and every
// validation error names the field path and says what is wrong, because a
// node agent that misreads its config can taint a fleet.
//
// A new probe goes into the probe registry (registry.go, DefaultRegistry):
// one section names its block under probes:, its probes (each a fault
// target with a default condition and default rule), its schedule, and
// its settings, which default and validate themselves (delegating to the
// probe package's Config validation) and build the probes from a host root
// or from NVML. Defaults, validation, the probes built and simulated,
// fault targets, default rules, ownership and `selftaint fault --help` all
// derive from the registry.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/custom"
	"github.com/selftaint/selftaint/probes/gpu"
	"github.com/selftaint/selftaint/probes/strict"
	"github.com/selftaint/selftaint/taints"
	"github.com/selftaint/selftaint/taints/fleet"
)

// Default condition types, one per probe. They deliberately differ from the
// kubelet's (MemoryPressure, DiskPressure, PIDPressure): those belong to the
// kubelet, and the node lifecycle controller taints from them.
const (
	DefaultMemoryCondition corev1.NodeConditionType = "SelftaintMemoryPressure"
	DefaultDiskCondition   corev1.NodeConditionType = "SelftaintDiskPressure"
	DefaultPIDCondition    corev1.NodeConditionType = "SelftaintPIDPressure"
	// The GPU probe feeds two: a fatal one (a GPU lost, a critical Xid,
	// uncorrectable memory errors) and a degraded one (pages or rows
	// pending retirement, hardware slowdown).
	DefaultGPUCondition         corev1.NodeConditionType = "SelftaintGPUFailure"
	DefaultGPUDegradedCondition corev1.NodeConditionType = "SelftaintGPUDegraded"
	DefaultNetworkCondition     corev1.NodeConditionType = "SelftaintNetworkUnavailable"
	// DefaultInitCondition is True until the node is initialized.
	DefaultInitCondition corev1.NodeConditionType = "SelftaintUninitialized"
)

// Initialization taints.
const (
	// DefaultInitTaintKey is the taint a node carries until initialized.
	DefaultInitTaintKey = "selftaint.io/uninitialized"
	// AutoscalerStartupTaintKey is the key used with
	// initialization.autoscalerStartupTaint: the cluster autoscaler treats
	// taints under startup-taint.cluster-autoscaler.kubernetes.io/ as a
	// node still starting, not as a reason the node cannot take pods.
	AutoscalerStartupTaintKey = "startup-taint.cluster-autoscaler.kubernetes.io/selftaint-uninitialized"
)

// DefaultGPUResource is the resource name NVIDIA GPUs go by; the NVIDIA
// device plugin advertises it through the kubelet.
const DefaultGPUResource = "nvidia.com/gpu"

// reservedConditions are condition types other components own.
var reservedConditions = map[corev1.NodeConditionType]string{
	corev1.NodeReady:              "the kubelet",
	corev1.NodeMemoryPressure:     "the kubelet",
	corev1.NodeDiskPressure:       "the kubelet",
	corev1.NodePIDPressure:        "the kubelet",
	corev1.NodeNetworkUnavailable: "the network plugin / cloud route controller",
	fleet.MaintenanceCondition:    "selftaint's coordinator (it says how the node's maintenance drain goes)",
}

// Config is the whole configuration file.
type Config struct {
	// HeartbeatPeriod is how often conditions are re-written even when
	// nothing changed, so readers can tell a live agent from a dead one.
	HeartbeatPeriod Duration `json:"heartbeatPeriod"`
	Probes          Probes   `json:"probes"`
	// Rules map conditions to taints. Absent means DefaultRules; an empty
	// list means no taints at all.
	Rules []Rule `json:"rules"`
	// Faults configures fault injection through Node annotations.
	Faults Faults `json:"faults"`
	// Hardware configures the special-hardware inventory: extended
	// resources, taints and labels.
	Hardware Hardware `json:"hardware"`
	// Checks are executables users bring (node-problem-detector's custom
	// plugin protocol).
	Checks Checks `json:"checks"`
	// Initialization configures the uninitialized taint.
	Initialization Initialization `json:"initialization"`
	// ChangeLimiter limits how often each condition's taints change.
	ChangeLimiter ChangeLimiter `json:"changeLimiter"`
	// Coordinator configures NoExecute grants and the disruption guard.
	Coordinator Coordinator `json:"coordinator"`

	// reg is the probe registry; nil means DefaultRegistry. Tests set
	// another.
	reg Registry
	// fromFiles are the conditions rules name that nothing in the config
	// itself feeds, taken on trust (Validate) because NPD files
	// (checks.npdConfigs, npdLogConfigs) may feed them: the files are read
	// where the probes are built, on the node, and CheckProbeSpecsOn
	// refuses a rule whose condition none of them feeds.
	fromFiles map[corev1.NodeConditionType]string
}

// registry is the config's probe registry.
func (c *Config) registry() Registry {
	if c.reg == nil {
		return DefaultRegistry()
	}
	return c.reg
}

// Checks configures user-supplied checks.
type Checks struct {
	// Concurrency is how many check executables run at once. Default 3.
	Concurrency int `json:"concurrency"`
	// MaxOutputLength caps the message (the first line of output), in
	// bytes. Default 80, as NPD.
	MaxOutputLength int `json:"maxOutputLength"`
	// Custom are checks given here.
	Custom []CustomCheck `json:"custom,omitempty"`
	// NPDConfigs are node-problem-detector custom-plugin-monitor JSON
	// files, read unchanged: their permanent rules become conditions,
	// their temporary rules Events on the Node.
	NPDConfigs []string `json:"npdConfigs,omitempty"`
	// NPDPluginRoot, if set, is where the host's file system is mounted:
	// the NPD files' absolute plugin paths are run from under it. Empty
	// means as written.
	NPDPluginRoot string `json:"npdPluginRoot,omitempty"`
	// NPDLogConfigs are node-problem-detector system-log-monitor JSON
	// files (NPD's --config.system-log-monitor; plugin "kmsg", "filelog"
	// or "journald"), read unchanged: their permanent rules become
	// conditions, their temporary rules Events on the Node (probes/logmon).
	NPDLogConfigs []string `json:"npdLogConfigs,omitempty"`
	// KmsgPath, if set, is the kernel log the kmsg files read, as this
	// process sees it (a FIFO in tests). Empty means each file's logPath
	// (/dev/kmsg) under the host root.
	KmsgPath string `json:"kmsgPath,omitempty"`
}

// CustomCheck is one executable: exit 0 OK, 1 a problem, anything else
// unknown; the first line of output is the message.
type CustomCheck struct {
	Name      string                   `json:"name"`
	Condition corev1.NodeConditionType `json:"condition"`
	// Reason while the check fails. Default CustomCheckFailed.
	Reason   string   `json:"reason,omitempty"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
	Interval Duration `json:"interval"`
	Timeout  Duration `json:"timeout"`
}

// Initialization configures the taint a node carries until selftaint has
// finished its first full probe round and hardware inventory and every
// required condition is healthy.
type Initialization struct {
	// Enabled turns it on. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Mode is "bootstrap" (once initialized, never tainted again) or
	// "continuous" (tainted again whenever a required condition fails).
	// Default bootstrap.
	Mode string `json:"mode"`
	// Condition is the condition type that reports the state: True while
	// uninitialized, with what is pending. Default SelftaintUninitialized.
	Condition corev1.NodeConditionType `json:"condition"`
	// Taint is the uninitialized taint. Default
	// selftaint.io/uninitialized:NoSchedule. Register nodes with it
	// (kubelet --register-with-taints=selftaint.io/uninitialized=:NoSchedule)
	// so no pod lands before selftaint has looked.
	Taint TaintSpec `json:"taint"`
	// AutoscalerStartupTaint uses the cluster autoscaler's startup-taint
	// key instead (see AutoscalerStartupTaintKey).
	AutoscalerStartupTaint bool `json:"autoscalerStartupTaint,omitempty"`
	// RequiredConditions must be at their healthy status (False) before
	// the node counts as initialized, e.g. a check that the GPU driver is
	// loaded.
	RequiredConditions []corev1.NodeConditionType `json:"requiredConditions,omitempty"`
}

// IsEnabled reports whether the uninitialized taint is managed.
func (i Initialization) IsEnabled() bool { return i.Enabled == nil || *i.Enabled }

// TaintSpec is a taint in the config.
type TaintSpec struct {
	Key    string             `json:"key"`
	Value  string             `json:"value,omitempty"`
	Effect corev1.TaintEffect `json:"effect"`
}

// Hardware configures what selftaint does about special hardware.
type Hardware struct {
	// Period between inventories. Default 1m.
	Period Duration `json:"period"`
	// NVML is how NVIDIA GPUs are found.
	NVML NVML `json:"nvml"`
	// GPU is what to do about NVIDIA GPUs.
	GPU HardwareAction `json:"gpu"`
	// PCI rules map PCI devices (vendor, device, class) to resources.
	PCI []PCIRule `json:"pci,omitempty"`
}

// NVML locates the NVIDIA management library.
type NVML struct {
	// LibraryPath of libnvidia-ml; default libnvidia-ml.so.1 from the
	// loader's search path. Without it, GPU support is off (one log line).
	LibraryPath string `json:"libraryPath,omitempty"`
}

// HardwareAction is what to do about one kind of hardware while the node
// has it.
type HardwareAction struct {
	// Resource is the extended resource name. Default for GPUs
	// nvidia.com/gpu.
	Resource string `json:"resource,omitempty"`
	// Advertise the count in the Node's status capacity and allocatable.
	// Default false for GPUs (the NVIDIA device plugin owns
	// nvidia.com/gpu), true for PCI rules.
	Advertise *bool `json:"advertise,omitempty"`
	// Taint with <resource>=present:NoSchedule, so only pods that request
	// the resource (and get the toleration from the
	// ExtendedResourceToleration admission plugin) land here. Default true.
	Taint *bool `json:"taint,omitempty"`
	// Label with <resource>.present=true, for pods that must land only
	// here. Default false for GPUs (GPU feature discovery sets
	// nvidia.com/gpu.present), true for PCI rules.
	Label *bool `json:"label,omitempty"`
}

// PCIRule maps PCI devices to a resource: vendor and optionally device ID
// and class, in hex as sysfs shows them ("0x10ee", "0x1200").
type PCIRule struct {
	HardwareAction `json:",inline"`
	Vendor         string `json:"vendor"`
	Device         string `json:"device,omitempty"`
	Class          string `json:"class,omitempty"`
}

// Faults configures fault injection: `selftaint fault inject` writes a
// fault.selftaint.io/<target> annotation and the agent publishes the
// condition it names until the fault expires.
type Faults struct {
	// Enabled makes the agent apply fault annotations. Default true; who may
	// inject is decided by RBAC on nodes patch.
	Enabled *bool `json:"enabled,omitempty"`
	// DefaultDuration is how long `selftaint fault inject` makes a fault
	// last when --for is not given. Default 10m.
	DefaultDuration Duration `json:"defaultDuration"`
	// MaxDuration is the longest a fault may last, counted from its start
	// (its injectedAt, or when its annotation was written; see
	// taints/faults); the agent rejects one expiring later. Default 1h, at
	// most MaxFaultDuration.
	MaxDuration Duration `json:"maxDuration"`
}

// IsEnabled reports whether the agent applies faults.
func (f Faults) IsEnabled() bool { return f.Enabled == nil || *f.Enabled }

// Probes configures each probe.
type Probes struct {
	Memory  MemoryProbe  `json:"memory"`
	Disk    DiskProbe    `json:"disk"`
	PID     PIDProbe     `json:"pid"`
	GPU     GPUProbe     `json:"gpu"`
	Network NetworkProbe `json:"network"`
}

// NetworkProbe configures the network probe: the uplink is up with
// carrier and an address, a default route exists, the CNI config is there,
// and the targets answer. It needs the host's network namespace
// (hostNetwork in the DaemonSet).
type NetworkProbe struct {
	Common `json:",inline"`
	// Interfaces to check; default those of the default routes.
	Interfaces []string `json:"interfaces,omitempty"`
	// DefaultRoute: any (default), ipv4, ipv6, both or none.
	DefaultRoute string `json:"defaultRoute"`
	// CheckCNIConfig: the CNI config directory must hold a config.
	// Default true.
	CheckCNIConfig *bool `json:"checkCNIConfig,omitempty"`
	// CNIConfDir default /etc/cni/net.d (on the host).
	CNIConfDir string `json:"cniConfDir"`
	// CheckAPIServer connects to the API server's service address
	// (KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT) when running in a
	// cluster. Default true.
	CheckAPIServer *bool `json:"checkAPIServer,omitempty"`
	// Targets must answer: {tcp: "host:port"} or {dns: "name"}.
	Targets []NetworkTarget `json:"targets,omitempty"`
	// TargetTimeout bounds each target without its own. Default 2s.
	TargetTimeout Duration `json:"targetTimeout"`
}

// NetworkTarget is one reachability check; exactly one of TCP and DNS.
type NetworkTarget struct {
	TCP     string   `json:"tcp,omitempty"`
	DNS     string   `json:"dns,omitempty"`
	Timeout Duration `json:"timeout"`
}

// Common is what every probe has.
type Common struct {
	// Enabled turns the probe on. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Interval between runs. Default 10s.
	Interval Duration `json:"interval"`
	// Timeout of one run; must be below Interval. Default 5s.
	Timeout Duration `json:"timeout"`
	// Condition is the NodeCondition type the probe feeds.
	Condition corev1.NodeConditionType `json:"condition"`
	// For is how long a problem must hold before the condition turns True.
	// Default 30s.
	For Duration `json:"for"`
	// ClearAfter is how long the probe must read healthy before the
	// condition turns False again. Default 2m.
	ClearAfter Duration `json:"clearAfter"`
}

// IsEnabled reports whether the probe runs.
func (c Common) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// MemoryProbe configures the memory probe.
type MemoryProbe struct {
	Common `json:",inline"`
	// AvailableBelow: a problem when MemAvailable drops below this (bytes
	// like "512Mi" or a percent of MemTotal like "5%"). Default 5%.
	AvailableBelow Threshold `json:"availableBelow"`
	// PSISomeAvg10Above / PSIFullAvg10Above: a problem when the kernel's
	// memory pressure stall percentage over 10s (/proc/pressure/memory)
	// is above this. 0 turns the check off. Defaults: both off (the
	// averages are in the message and readings; PSI's stall rules decide).
	PSISomeAvg10Above *float64 `json:"psiSomeAvg10Above,omitempty"`
	PSIFullAvg10Above *float64 `json:"psiFullAvg10Above,omitempty"`
	// PSI are the stall rules decided on the kernel's PSI triggers.
	PSI MemoryPSI `json:"psi"`
}

// MemoryPSI are the memory probe's stall rules, one per line of
// /proc/pressure/memory: "some" (at least one task stalled on memory) and
// "full" (all non-idle tasks at once).
type MemoryPSI struct {
	// Some: default off (stall 0s, window 2s).
	Some PSIStall `json:"some"`
	// Full: default 500ms within 2s (25%, as the old full avg10 rule).
	Full PSIStall `json:"full"`
}

// PSIStall is a stall rule: a problem from the moment the kernel's PSI
// trigger says tasks stalled Stall or more within Window, until the stall
// the probe measures over a window falls below that rate.
type PSIStall struct {
	// Stall: 0 turns the rule off.
	Stall Duration `json:"stall"`
	// Window: 500ms to 10s; without CAP_SYS_RESOURCE (the image runs as
	// uid 65532 without it) a multiple of 2s. Default 2s.
	Window Duration `json:"window"`
}

// DiskProbe configures the disk probe.
type DiskProbe struct {
	Common `json:",inline"`
	// Paths on the host to check. Default: / plus /var/lib/kubelet and
	// /var/lib/containerd where they exist.
	Paths []string `json:"paths,omitempty"`
	// FreeBelow: a problem when free space drops below this. Default 10%.
	FreeBelow Threshold `json:"freeBelow"`
	// InodesFreeBelow: a problem when free inodes drop below this (a count
	// or a percent). Default 5%.
	InodesFreeBelow Threshold `json:"inodesFreeBelow"`
}

// PIDProbe configures the PID probe.
type PIDProbe struct {
	Common `json:",inline"`
	// UsedAbove: a problem when threads in use exceed this (a count, or a
	// percent of min(kernel.pid_max, kernel.threads-max)). Default 90%.
	UsedAbove Threshold `json:"usedAbove"`
}

// GPUProbe configures the NVIDIA GPU health probe (through NVML). It is off
// by itself, with one log line, where there is no NVIDIA driver library.
// Its own condition is the fatal one; Degraded has the degraded one.
type GPUProbe struct {
	Common `json:",inline"`
	// Degraded is the degraded condition's type and damping; its probe
	// runs with the fatal one's interval and timeout.
	Degraded GPUDegraded `json:"degraded"`
	// Xids override NVIDIA's Xid catalog (probes/gpu/xids.csv) per Xid:
	// ignore, restart-app, reset-gpu, reboot or contact-support. They
	// extend the catalog; Xids not named keep NVIDIA's action.
	Xids map[uint64]gpu.Action `json:"xids,omitempty"`
	// SkipXids are Xids to ignore, as if Xids said ignore for each; the
	// older form, kept for existing configs. It extends the catalog.
	SkipXids []uint64 `json:"skipXids,omitempty"`
	// ECCUncorrectedAbove: fatal when a GPU's volatile uncorrectable ECC
	// error count is above this. Default 0.
	ECCUncorrectedAbove uint64 `json:"eccUncorrectedAbove"`
	// IgnoreSlowdown turns off the hardware/thermal slowdown check.
	IgnoreSlowdown bool `json:"ignoreSlowdown,omitempty"`
	// ExpectedGPUs is how many GPUs the node has. 0 (default): the NVIDIA
	// GPUs on its PCI bus (display and 3D controllers of vendor 0x10de not
	// handed to another driver such as vfio-pci). When set it is the whole
	// baseline and wins over the PCI bus: an operator who accepts a dead GPU
	// sets it one lower (the bus then only names which GPU is missing).
	ExpectedGPUs int `json:"expectedGPUs"`
	// Sustained are the limits of signals judged over a window.
	Sustained GPUSustained `json:"sustained"`
	// KernelLog: the probe also takes Xids from the kernel log's NVRM
	// lines, the channel that still talks while NVML hangs. Unset, it
	// takes them from the kmsg log monitor (checks.npdLogConfigs) that
	// reads checks.kmsgPath or the host's /dev/kmsg, where one is
	// configured, and opens nothing itself; true, it also reads the kernel
	// log itself where none is (the events-only probe
	// logmon-gpu-kernel-log), which needs what a kmsg log monitor needs
	// (deploy/kernel-log); false, it hears NVML's Xid events only.
	KernelLog *bool `json:"kernelLog,omitempty"`
}

// GPUSustained are the GPU signals judged over a sliding window, so one
// sample never decides. A limit of 0 turns its check off.
type GPUSustained struct {
	// Window is what they are judged over. Default 10m.
	Window Duration `json:"window"`
	// SlowdownPercent: degraded when hardware held the clocks down for
	// more than this share of the window. Default 25.
	SlowdownPercent *float64 `json:"slowdownPercent"`
	// ThermalViolationPercent: degraded when NVML's thermal violation time
	// is above this share of the window. Default 10.
	ThermalViolationPercent *float64 `json:"thermalViolationPercent"`
	// PowerViolationPercent: likewise for power. Default 50 (a GPU at its
	// power limit under load is normal).
	PowerViolationPercent *float64 `json:"powerViolationPercent"`
	// PCIeReplaysPerMinute: degraded when the PCIe replay counter rises
	// faster. Default 8 (DCGM's limit).
	PCIeReplaysPerMinute *float64 `json:"pcieReplaysPerMinute"`
	// NVLinkErrorsPerMinute: degraded when a GPU's NVLink replay, recovery
	// and CRC errors rise faster. Default 60.
	NVLinkErrorsPerMinute *float64 `json:"nvlinkErrorsPerMinute"`
}

// GPUDegraded is the GPU probe's degraded condition.
type GPUDegraded struct {
	Condition  corev1.NodeConditionType `json:"condition"`
	For        Duration                 `json:"for"`
	ClearAfter Duration                 `json:"clearAfter"`
}

// Rule is one line of the condition -> taint table.
type Rule struct {
	Condition corev1.NodeConditionType `json:"condition"`
	// Status that applies the taint. Default "True".
	Status corev1.ConditionStatus `json:"status"`
	// TaintOnUnknown applies the taint while the condition is Unknown too.
	TaintOnUnknown bool `json:"taintOnUnknown,omitempty"`
	Taint          struct {
		Key    string             `json:"key"`
		Value  string             `json:"value,omitempty"`
		Effect corev1.TaintEffect `json:"effect"`
	} `json:"taint"`
	// AllowReservedKey permits a key under node.kubernetes.io/ or
	// node.cloudprovider.kubernetes.io/, which other controllers rewrite.
	AllowReservedKey bool `json:"allowReservedKey,omitempty"`
	// Fallback is the effect a NoExecute rule's taint takes while the node
	// holds no NoExecute grant: NoSchedule (the default) or
	// PreferNoSchedule. Only NoExecute rules have one.
	Fallback corev1.TaintEffect `json:"fallback,omitempty"`
	// Action is what the rule does while it applies: ActionTaint (the
	// default) puts its taint on; ActionDrain asks the coordinator to drain
	// the node (a sick-node drain, within the maintenance pool and the
	// disruption guard), after its taint where the rule has one, instead of
	// it where it has none.
	Action string `json:"action,omitempty"`
	// Drain are an ActionDrain rule's drain settings.
	Drain *DrainSettings `json:"drain,omitempty"`
}

// The actions of a rule.
const (
	ActionTaint = "taint"
	ActionDrain = "drain"
)

// DrainSettings are what a rule with action: drain asks of the drain.
// Where several drain rules apply at once, the node asks for one drain:
// the shortest of their deadlines, and each pod option any of them sets.
type DrainSettings struct {
	// Deadline is how long the drain may take once it has started (got
	// its slot). Default coordinator.maintenance.defaultDeadline; at most
	// 720h (fleet.MaxDeadline).
	Deadline Duration `json:"deadline"`
	// EvictUnreplicated evicts pods no controller manages (kubectl
	// drain's --force); without it they stay and block the drain.
	EvictUnreplicated bool `json:"evictUnreplicated,omitempty"`
	// DeleteEmptyDirData evicts pods with emptyDir volumes, whose data is
	// lost (kubectl drain's --delete-emptydir-data); without it they stay
	// and block the drain.
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`
	// EndWhenHealthy ends the node's maintenance (withdraws its request:
	// the coordinator uncordons it) once no drain rule applies any more,
	// after the condition's clearAfter. Without it a drain that has
	// started keeps the node cordoned until an operator removes the
	// request (kubectl annotate node NODE selftaint.io/drain-request-); a
	// request whose condition clears while it still waits for a slot is
	// withdrawn either way.
	EndWhenHealthy bool `json:"endWhenHealthy,omitempty"`
}

// hasTaint reports whether the rule names a taint at all.
func (r Rule) hasTaint() bool {
	return r.Taint.Key != "" || r.Taint.Value != "" || r.Taint.Effect != ""
}

// makesTaint reports whether the rule puts a taint on: every rule but a
// drain rule without one.
func (r Rule) makesTaint() bool { return r.Action != ActionDrain || r.hasTaint() }

// rawValue is the text a field was written with and the error parsing it
// met, kept so Validate can report the error with the field's path.
type rawValue struct {
	raw string
	err error
}

// set reports whether the field was written at all.
func (r rawValue) set() bool { return r.raw != "" }

// parseError is the parse error as a field error, or nil.
func (r rawValue) parseError(p *field.Path) field.ErrorList {
	if r.err == nil {
		return nil
	}
	return field.ErrorList{field.Invalid(p, r.raw, r.err.Error())}
}

// Duration is a Go duration string ("30s", "5m").
type Duration struct {
	D time.Duration
	rawValue
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.raw, d.err = string(b), fmt.Errorf("must be a duration string such as \"30s\" or \"5m\"")
		return nil
	}
	d.raw = s
	d.D, d.err = parseDuration(s)
	return nil
}

// durationSyntax is what time.ParseDuration reads: an optional sign, then
// numbers with units.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration is time.ParseDuration with errors that say what is wrong:
// not a duration, or one too long to represent.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err == nil:
		return d, nil
	case durationSyntax.MatchString(s) && strings.ContainsAny(s, "0123456789"):
		return 0, fmt.Errorf("is too long: a duration must be below %s (about 292 years)", time.Duration(math.MaxInt64).Truncate(time.Hour))
	default:
		return 0, fmt.Errorf("must be a duration such as \"30s\" or \"5m\"")
	}
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.D.String()) }

func (d Duration) validate(p *field.Path, allowZero bool) field.ErrorList {
	switch {
	case d.err != nil:
		return d.parseError(p)
	case d.D < 0:
		return field.ErrorList{field.Invalid(p, d.raw, "must not be negative")}
	case d.D == 0 && !allowZero && d.set():
		return field.ErrorList{field.Invalid(p, d.raw, "must be greater than zero")}
	}
	return nil
}

// Threshold is an amount ("512Mi", "1000") or a percent ("5%"); see
// probes.ParseThreshold.
type Threshold struct {
	T probes.Threshold
	rawValue
}

// UnmarshalJSON implements json.Unmarshaler; bare numbers are accepted,
// also in the exponent form YAML turns integers beyond 64 bits into
// (99999999999999999999999 arrives as 1e+23), so that the range checks,
// not the syntax, judge them.
func (t *Threshold) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var f json.Number
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&f) != nil {
			t.raw, t.err = string(b), fmt.Errorf("must be an amount such as \"512Mi\" or a percent such as \"5%%\"")
			return nil
		}
		s = plainNumber(f)
	}
	t.raw = s
	t.T, t.err = probes.ParseThreshold(s)
	return nil
}

// plainNumber writes a JSON number without an exponent when it has one
// and is finite: "1e+23" as "100000000000000000000000".
func plainNumber(n json.Number) string {
	s := n.String()
	if !strings.ContainsAny(s, "eE") {
		return s
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) {
		return s
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// MarshalJSON implements json.Marshaler.
func (t Threshold) MarshalJSON() ([]byte, error) { return json.Marshal(t.T.String()) }

// Load reads, decodes, defaults and validates the file at path. An empty
// path means the built-in defaults.
func Load(path string) (*Config, error) {
	if path == "" {
		return Parse(nil)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML (or JSON) strictly, fills defaults and validates.
func Parse(b []byte) (*Config, error) {
	c := &Config{}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := strict.YAML(b, c); err != nil {
			var fe *strict.FieldError
			if errors.As(err, &fe) && len(fe.Unknown) > 0 {
				return nil, fmt.Errorf("decoding: %w (fields are case-sensitive; see deploy/configmap.yaml for every field)", err)
			}
			return nil, fmt.Errorf("decoding: %w", err)
		}
	}
	c.setDefaults()
	if errs := c.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid: %w", errs.ToAggregate())
	}
	return c, nil
}

func ptr[T any](v T) *T { return &v }

func defaultDuration(d *Duration, v time.Duration) {
	if !d.set() {
		d.D = v
	}
}

func defaultThreshold(t *Threshold, v probes.Threshold) {
	if !t.set() {
		t.T = v
	}
}

// commonDefaults are a probe's defaults for the settings every probe has.
type commonDefaults struct {
	condition                           corev1.NodeConditionType
	interval, timeout, forD, clearAfter time.Duration
}

func defaultCommon(c *Common, d commonDefaults) {
	if c.Enabled == nil {
		c.Enabled = ptr(true)
	}
	defaultDuration(&c.Interval, d.interval)
	defaultDuration(&c.Timeout, d.timeout)
	defaultDuration(&c.For, d.forD)
	defaultDuration(&c.ClearAfter, d.clearAfter)
	if c.Condition == "" {
		c.Condition = d.condition
	}
}

func (c *Config) setDefaults() {
	defaultDuration(&c.HeartbeatPeriod, 5*time.Minute)
	c.registry().setDefaults(&c.Probes)
	c.Checks.setDefaults()
	c.Initialization.setDefaults()
	h := &c.Hardware
	defaultDuration(&h.Period, time.Minute)
	if h.GPU.Resource == "" {
		h.GPU.Resource = DefaultGPUResource
	}
	h.GPU.setDefaults(false, true, false)
	for i := range h.PCI {
		h.PCI[i].setDefaults(true, true, true)
	}
	if c.Faults.Enabled == nil {
		c.Faults.Enabled = ptr(true)
	}
	defaultDuration(&c.Faults.DefaultDuration, 10*time.Minute)
	defaultDuration(&c.Faults.MaxDuration, time.Hour)
	c.ChangeLimiter.setDefaults()
	c.Coordinator.setDefaults()
	if c.Rules == nil {
		c.Rules = c.registry().DefaultRules()
	}
	for i := range c.Rules {
		if c.Rules[i].Status == "" {
			c.Rules[i].Status = corev1.ConditionTrue
		}
		if c.Rules[i].Action == "" {
			c.Rules[i].Action = ActionTaint
		}
	}
}

func (ch *Checks) setDefaults() {
	if ch.Concurrency == 0 {
		ch.Concurrency = custom.DefaultConcurrency
	}
	if ch.MaxOutputLength == 0 {
		ch.MaxOutputLength = custom.DefaultMaxOutputLength
	}
	for i := range ch.Custom {
		defaultDuration(&ch.Custom[i].Interval, custom.DefaultInterval)
		defaultDuration(&ch.Custom[i].Timeout, custom.DefaultTimeout)
	}
}

func (in *Initialization) setDefaults() {
	if in.Enabled == nil {
		in.Enabled = ptr(true)
	}
	if in.Mode == "" {
		in.Mode = InitBootstrap
	}
	if in.Condition == "" {
		in.Condition = DefaultInitCondition
	}
	if in.Taint.Key == "" {
		in.Taint.Key = DefaultInitTaintKey
		if in.AutoscalerStartupTaint {
			in.Taint.Key = AutoscalerStartupTaintKey
		}
	}
	if in.Taint.Effect == "" {
		in.Taint.Effect = corev1.TaintEffectNoSchedule
	}
}

func (a *HardwareAction) setDefaults(advertise, taint, label bool) {
	if a.Advertise == nil {
		a.Advertise = ptr(advertise)
	}
	if a.Taint == nil {
		a.Taint = ptr(taint)
	}
	if a.Label == nil {
		a.Label = ptr(label)
	}
}

// DefaultRules taints while each probe's default condition is True, with
// the probe's default taint (see DefaultRegistry): NoSchedule, and
// PreferNoSchedule while a GPU is degraded.
func DefaultRules() []Rule { return DefaultRegistry().DefaultRules() }

// Validate checks the (defaulted) config and returns every problem found.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, c.HeartbeatPeriod.validate(field.NewPath("heartbeatPeriod"), false)...)
	if c.HeartbeatPeriod.err == nil && c.HeartbeatPeriod.D < 10*time.Second {
		errs = append(errs, field.Invalid(field.NewPath("heartbeatPeriod"), c.HeartbeatPeriod.D.String(), "must be at least 10s"))
	}
	conds := map[corev1.NodeConditionType]*field.Path{}
	known := map[corev1.NodeConditionType]bool{}
	errs = append(errs, c.registry().validate(&c.Probes, conds, known)...)
	errs = append(errs, c.Hardware.validate(field.NewPath("hardware"))...)
	errs = append(errs, c.Checks.validate(field.NewPath("checks"), conds, known)...)
	errs = append(errs, c.Initialization.validate(field.NewPath("initialization"), conds)...)
	known[c.Initialization.Condition] = true
	c.fromFiles = c.ruleConditionsFromFiles(field.NewPath("rules"), known)

	errs = append(errs, c.validateRules(field.NewPath("rules"), known)...)
	errs = append(errs, c.Faults.validate(field.NewPath("faults"))...)
	errs = append(errs, c.ChangeLimiter.validate(field.NewPath("changeLimiter"))...)
	errs = append(errs, c.Coordinator.validate(field.NewPath("coordinator"))...)
	return errs
}

// validate checks the checks, adding their conditions to conds and known.
// Custom checks may share a condition with each other (they feed it
// together), not with anything else.
func (ch Checks) validate(cp *field.Path, conds map[corev1.NodeConditionType]*field.Path, known map[corev1.NodeConditionType]bool) field.ErrorList {
	var errs field.ErrorList
	if ch.Concurrency < 1 {
		errs = append(errs, field.Invalid(cp.Child("concurrency"), ch.Concurrency, "must be at least 1"))
	}
	if ch.MaxOutputLength < 1 {
		errs = append(errs, field.Invalid(cp.Child("maxOutputLength"), ch.MaxOutputLength, "must be at least 1"))
	}
	customConds := map[corev1.NodeConditionType]bool{}
	for i, ck := range ch.Custom {
		p := cp.Child("custom").Index(i)
		errs = append(errs, ck.Interval.validate(p.Child("interval"), false)...)
		errs = append(errs, ck.Timeout.validate(p.Child("timeout"), false)...)
		errs = append(errs, validateConditionType(p.Child("condition"), ck.Condition)...)
		if prev, dup := conds[ck.Condition]; dup && !customConds[ck.Condition] {
			errs = append(errs, field.Duplicate(p.Child("condition"), fmt.Sprintf("%s (also %s)", ck.Condition, prev)))
		}
		conds[ck.Condition] = p.Child("condition")
		customConds[ck.Condition] = true
		known[ck.Condition] = true
	}
	if _, err := custom.ConditionsFromChecks(ch.customChecks()); err != nil {
		errs = append(errs, customCheckErrors(cp, err, errs)...)
	}
	for i, path := range ch.NPDConfigs {
		if !strings.HasPrefix(path, "/") {
			errs = append(errs, field.Invalid(cp.Child("npdConfigs").Index(i), path, "must be an absolute path"))
		}
	}
	for i, path := range ch.NPDLogConfigs {
		if !strings.HasPrefix(path, "/") {
			errs = append(errs, field.Invalid(cp.Child("npdLogConfigs").Index(i), path, "must be an absolute path"))
		}
	}
	if ch.KmsgPath != "" && !strings.HasPrefix(ch.KmsgPath, "/") {
		errs = append(errs, field.Invalid(cp.Child("kmsgPath"), ch.KmsgPath, "must be an absolute path"))
	}
	if ch.NPDPluginRoot != "" && !strings.HasPrefix(ch.NPDPluginRoot, "/") {
		errs = append(errs, field.Invalid(cp.Child("npdPluginRoot"), ch.NPDPluginRoot, "must be an absolute path"))
	}
	return errs
}

// ruleConditionsFromFiles adds to known the conditions rules name that
// nothing in the config feeds, where NPD files may feed them (the config
// names some), and returns them with the first rule naming each; nil
// without NPD files. The files are read where the probes are built
// (CheckProbeSpecsOn), which refuses a rule none of them feeds.
func (c *Config) ruleConditionsFromFiles(path *field.Path, known map[corev1.NodeConditionType]bool) map[corev1.NodeConditionType]string {
	if len(c.Checks.NPDConfigs)+len(c.Checks.NPDLogConfigs) == 0 {
		return nil
	}
	var out map[corev1.NodeConditionType]string
	for i, r := range c.Rules {
		if r.Condition == "" || known[r.Condition] || len(validateConditionType(nil, r.Condition)) > 0 {
			continue
		}
		if out == nil {
			out = map[corev1.NodeConditionType]string{}
		}
		if _, seen := out[r.Condition]; !seen {
			out[r.Condition] = path.Index(i).Child("condition").String()
		}
		known[r.Condition] = true
	}
	return out
}

// validateRules checks the rule table: each rule's taint where it makes
// one (taints.ValidateRulesAt), the condition and status of a drain rule
// without one, and each rule's action and drain settings.
func (c *Config) validateRules(path *field.Path, known map[corev1.NodeConditionType]bool) field.ErrorList {
	var errs field.ErrorList
	var taintRules []taints.Rule
	var paths []*field.Path
	for i, r := range c.Rules {
		p := path.Index(i)
		if r.makesTaint() {
			taintRules = append(taintRules, taintRule(r))
			paths = append(paths, p)
		} else {
			errs = append(errs, taints.ValidateTrigger(r.Condition, r.Status, known, p)...)
			if r.Fallback != "" {
				errs = append(errs, field.Invalid(p.Child("fallback"), r.Fallback, "only a NoExecute rule has a fallback effect; this drain rule has no taint"))
			}
		}
		errs = append(errs, r.validateAction(p)...)
	}
	return append(taints.ValidateRulesAt(taintRules, paths, known), errs...)
}

// validateAction checks a rule's action and its drain settings.
func (r Rule) validateAction(p *field.Path) field.ErrorList {
	switch r.Action {
	case ActionTaint:
		if r.Drain != nil {
			return field.ErrorList{field.Forbidden(p.Child("drain"), "drain settings need action: drain (this rule's action is taint)")}
		}
		return nil
	case ActionDrain:
	default:
		return field.ErrorList{field.NotSupported(p.Child("action"), r.Action, []string{ActionTaint, ActionDrain})}
	}
	if r.Drain == nil {
		return nil
	}
	return validateDeadline(p.Child("drain", "deadline"), r.Drain.Deadline)
}

// validateDeadline checks a drain deadline as fleet.ParseMaintenanceRequest
// would: positive, at most fleet.MaxDeadline. Unset is valid (a default
// applies).
func validateDeadline(p *field.Path, d Duration) field.ErrorList {
	if errs := d.validate(p, false); len(errs) > 0 {
		return errs
	}
	if d.D > fleet.MaxDeadline {
		return field.ErrorList{field.Invalid(p, d.raw, fmt.Sprintf("must be at most %s (a drain never waits forever)", fleet.MaxDeadline))}
	}
	return nil
}

// Initialization modes.
const (
	InitBootstrap  = "bootstrap"
	InitContinuous = "continuous"
)

func (i Initialization) validate(p *field.Path, conds map[corev1.NodeConditionType]*field.Path) field.ErrorList {
	var errs field.ErrorList
	if i.Mode != InitBootstrap && i.Mode != InitContinuous {
		errs = append(errs, field.NotSupported(p.Child("mode"), i.Mode, []string{InitBootstrap, InitContinuous}))
	}
	errs = append(errs, validateConditionType(p.Child("condition"), i.Condition)...)
	if prev, dup := conds[i.Condition]; dup {
		errs = append(errs, field.Duplicate(p.Child("condition"), fmt.Sprintf("%s (also %s)", i.Condition, prev)))
	}
	rule := taints.Rule{Condition: i.Condition, Status: corev1.ConditionTrue, Taint: corev1.Taint{Key: i.Taint.Key, Value: i.Taint.Value, Effect: i.Taint.Effect}}
	for _, e := range taints.ValidateRules([]taints.Rule{rule}, map[corev1.NodeConditionType]bool{i.Condition: true}, p) {
		e.Field = strings.Replace(e.Field, p.String()+"[0]", p.String(), 1)
		errs = append(errs, e)
	}
	if i.AutoscalerStartupTaint && i.Taint.Key != AutoscalerStartupTaintKey {
		errs = append(errs, field.Invalid(p.Child("taint", "key"), i.Taint.Key, "autoscalerStartupTaint sets the key; leave taint.key out"))
	}
	for j, c := range i.RequiredConditions {
		if _, ok := conds[c]; !ok {
			errs = append(errs, field.Invalid(p.Child("requiredConditions").Index(j), string(c), "no probe or check feeds this condition"))
		}
	}
	return errs
}

func (h Hardware) validate(p *field.Path) field.ErrorList {
	errs := h.Period.validate(p.Child("period"), false)
	if err := hardware.ValidateResourceName(h.GPU.Resource); err != nil {
		errs = append(errs, field.Invalid(p.Child("gpu", "resource"), h.GPU.Resource, err.Error()))
	}
	// Rules for one resource add up their devices; they must agree on
	// what to do about it.
	first := map[string]int{}
	for i, r := range h.PCI {
		rp := p.Child("pci").Index(i)
		rule := hardware.PCIRule{Resource: r.Resource, Vendor: r.Vendor, Device: r.Device, Class: r.Class}
		if err := rule.Validate(); err != nil {
			errs = append(errs, field.Invalid(rp, fmt.Sprintf("resource %q vendor %q device %q class %q", r.Resource, r.Vendor, r.Device, r.Class), err.Error()))
		}
		if r.Resource == h.GPU.Resource {
			errs = append(errs, field.Invalid(rp.Child("resource"), r.Resource, "is the GPU resource (hardware.gpu.resource); GPUs are counted through NVML"))
		}
		j, seen := first[r.Resource]
		if !seen {
			first[r.Resource] = i
			continue
		}
		if a := h.PCI[j].HardwareAction; *a.Advertise != *r.Advertise || *a.Taint != *r.Taint || *a.Label != *r.Label {
			errs = append(errs, field.Invalid(rp, r.Resource, fmt.Sprintf("advertise, taint and label must match hardware.pci[%d], which names the same resource", j)))
		}
	}
	return errs
}

// MaxFaultDuration bounds faults.maxDuration: a fault is a drill, and
// every fault expires, so that a forgotten one never taints a node for
// good.
const MaxFaultDuration = 7 * 24 * time.Hour

func (f Faults) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, f.DefaultDuration.validate(p.Child("defaultDuration"), false)...)
	errs = append(errs, f.MaxDuration.validate(p.Child("maxDuration"), false)...)
	if len(errs) == 0 && f.MaxDuration.D > MaxFaultDuration {
		errs = append(errs, field.Invalid(p.Child("maxDuration"), f.MaxDuration.raw,
			fmt.Sprintf("must be at most %s (a week): every fault expires, so a forgotten one never taints a node for good", MaxFaultDuration)))
	}
	if len(errs) == 0 && f.DefaultDuration.D > f.MaxDuration.D {
		errs = append(errs, field.Invalid(p.Child("defaultDuration"), f.DefaultDuration.D.String(),
			fmt.Sprintf("must not exceed maxDuration (%s)", f.MaxDuration.D)))
	}
	return errs
}

func validateConditionType(p *field.Path, t corev1.NodeConditionType) field.ErrorList {
	if t == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if owner, ok := reservedConditions[t]; ok {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("%s belongs to %s; selftaint writes only its own condition types", t, owner))}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(t)) {
		errs = append(errs, field.Invalid(p, string(t), msg))
	}
	return errs
}

// TaintRules converts the rule table's taints to the taints package's
// form: every rule but a drain rule without a taint.
func (c *Config) TaintRules() []taints.Rule {
	out := make([]taints.Rule, 0, len(c.Rules))
	for _, r := range c.Rules {
		if r.makesTaint() {
			out = append(out, taintRule(r))
		}
	}
	return out
}

func taintRule(r Rule) taints.Rule {
	return taints.Rule{
		Condition:        r.Condition,
		Status:           r.Status,
		TaintOnUnknown:   r.TaintOnUnknown,
		Taint:            corev1.Taint{Key: r.Taint.Key, Value: r.Taint.Value, Effect: r.Taint.Effect},
		AllowReservedKey: r.AllowReservedKey,
		Fallback:         fallbackOf(r),
	}
}

// DrainRules are the rules with action: drain, in the taints package's
// form; a rule that gives no deadline gets
// coordinator.maintenance.defaultDeadline, so that the request says the
// deadline that applies and the shortest of several is exact.
func (c *Config) DrainRules() []taints.DrainRule {
	var out []taints.DrainRule
	for _, r := range c.Rules {
		if r.Action != ActionDrain {
			continue
		}
		d := taints.DrainRule{
			Condition: r.Condition, Status: r.Status, OnUnknown: r.TaintOnUnknown,
			Deadline: c.Coordinator.Maintenance.DefaultDeadline.D,
		}
		if s := r.Drain; s != nil {
			if s.Deadline.set() {
				d.Deadline = s.Deadline.D
			}
			d.EvictUnreplicated, d.DeleteEmptyDirData, d.EndWhenHealthy = s.EvictUnreplicated, s.DeleteEmptyDirData, s.EndWhenHealthy
		}
		out = append(out, d)
	}
	return out
}

// fallbackOf is a rule's fallback effect: NoSchedule for a NoExecute rule
// that names none (Warnings says so).
func fallbackOf(r Rule) corev1.TaintEffect {
	if r.Fallback == "" && r.Taint.Effect == corev1.TaintEffectNoExecute {
		return corev1.TaintEffectNoSchedule
	}
	return r.Fallback
}

// Damping returns a probe's damping.
func (c Common) Damping() taints.Damping {
	return taints.Damping{For: c.For.D, ClearAfter: c.ClearAfter.D}
}

// customChecks converts the custom checks to the custom package's form.
func (ch Checks) customChecks() []custom.Check {
	out := make([]custom.Check, 0, len(ch.Custom))
	for _, ck := range ch.Custom {
		out = append(out, custom.Check{
			Name: ck.Name, Condition: string(ck.Condition), Reason: ck.Reason, Path: ck.Path, Args: ck.Args,
			Interval: ck.Interval.D, Timeout: ck.Timeout.D,
		})
	}
	return out
}
