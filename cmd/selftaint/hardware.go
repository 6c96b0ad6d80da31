package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"

	"github.com/selftaint/selftaint/agent"
	"github.com/selftaint/selftaint/agent/config"
	"github.com/selftaint/selftaint/hardware"
	"github.com/selftaint/selftaint/probes"
	"github.com/selftaint/selftaint/probes/gpu"
)

// apiServerFromEnv is the API server's service address inside a cluster
// (KUBERNETES_SERVICE_HOST and _PORT), for the network probe; empty
// outside one.
func apiServerFromEnv() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// machine is everything the agent and check look at on this host: the
// probes (the GPU ones when there is a driver) and the hardware inventory.
type machine struct {
	specs     []agent.ProbeSpec
	inventory agent.Inventory
	// ownership is what the config lets the agent own, its checks'
	// conditions included.
	ownership agent.Ownership
	// gpuOff says why there is no GPU support, when there is none.
	gpuOff string
	close  func()
}

// conditionsOf is the conditions specs feed; events-only specs feed none.
func conditionsOf(specs []agent.ProbeSpec) []corev1.NodeConditionType {
	out := make([]corev1.NodeConditionType, 0, len(specs))
	for _, s := range specs {
		if !s.EventsOnly() {
			out = append(out, s.Condition)
		}
	}
	return out
}

// openMachine builds the probes and inventory the config asks for. NVML is
// opened when the GPU probe or GPU inventory can use it. Without the driver
// library on a node with no NVIDIA GPU on its PCI bus GPU support is off
// and that is said once, in gpuOff, and logged by the caller. Where the bus
// has NVIDIA GPUs but NVML does not start (the GPU operator's driver
// container often comes up after the DaemonSets), the GPU probe reports
// GPUDriverUnavailable and retries with backoff; the agent runs normally.
func openMachine(cfg *config.Config, host probes.Host, log *slog.Logger) (*machine, error) {
	checks, checksCloser, err := cfg.CheckProbeSpecsOn(host, log)
	if err != nil {
		return nil, err
	}
	m, err := openHardware(cfg, host, checks, checksCloser, log)
	if err != nil {
		_ = checksCloser.Close()
		return nil, err
	}
	closeHardware := m.close
	m.close = func() {
		closeHardware()
		if err := checksCloser.Close(); err != nil {
			log.Warn("closing the log monitors", "err", err)
		}
	}
	return m, nil
}

// openHardware is openMachine once the checks are built: the host probes,
// the GPU probes (taking the kernel's Xid lines from logs' kmsg monitor, or
// a reader of their own) and the inventory.
func openHardware(cfg *config.Config, host probes.Host, checks []agent.ProbeSpec, logs *config.LogMonitors, log *slog.Logger) (*machine, error) {
	specs, err := cfg.ProbeSpecs(host, apiServerFromEnv())
	if err != nil {
		return nil, err
	}
	specs = append(specs, checks...)
	m := &machine{specs: specs, ownership: cfg.Ownership(conditionsOf(checks)), close: func() {}}
	path := cfg.Hardware.NVML.LibraryPath
	lib, openErr := hardware.OpenNVML(path)
	onPCI, pciErr := hardware.NVIDIAGPUsOnPCI(host)
	if err := openErr; err != nil {
		lib = nil
		if len(onPCI) == 0 {
			why := "no NVIDIA driver"
			if !errors.Is(err, hardware.ErrNVMLNotFound) && !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
				why = "NVML failed to start"
			}
			m.gpuOff = fmt.Sprintf("%s (%v) and no NVIDIA GPU on the PCI bus: GPU probe and GPU inventory are off", why, err)
			if pciErr != nil {
				m.gpuOff += fmt.Sprintf(" (the PCI bus could not be listed: %v)", pciErr)
			}
			m.inventory = cfg.Inventory(host, nil, log)
			return m, nil
		}
		log.Warn("NVML did not start on a node with NVIDIA GPUs on its PCI bus; the GPU probe reports it and retries", "err", err, "gpus", len(onPCI))
	}
	env := gpu.Env{
		Lib:       lib,
		Open:      func() (nvml.Interface, error) { return hardware.OpenNVML(path) },
		GPUsOnPCI: func() ([]string, error) { return hardware.NVIDIAGPUsOnPCI(host) },
		BootID:    func() (string, error) { return hardware.BootID(host) },
	}
	gpuSpecs, closer, err := cfg.GPUProbeSpecsOn(env, logs)
	if err != nil {
		if lib != nil {
			_ = hardware.ShutdownNVML(lib)
		}
		return nil, err
	}
	m.specs = append(m.specs, gpuSpecs...)
	monitor, _ := closer.(config.GPUCounter)
	switch {
	case monitor != nil:
		// The GPU monitor owns NVML (it reopens it after a driver
		// upgrade); the inventory counts GPUs through it, on its
		// per-GPU workers and deadlines.
		m.inventory = cfg.Inventory(host, monitor, log)
		m.close = func() {
			if err := closer.Close(); err != nil {
				log.Warn("closing the GPU monitor", "err", err)
			}
		}
	case lib != nil:
		m.inventory = cfg.Inventory(host, hardware.NewCounter(lib, hardware.DefaultCountTimeout), log)
		m.close = func() {
			if closer != nil {
				if err := closer.Close(); err != nil {
					log.Warn("closing the GPU probes", "err", err)
				}
			}
			if err := hardware.ShutdownNVML(lib); err != nil {
				log.Warn("shutting NVML down", "err", err)
			}
		}
	default:
		m.inventory = cfg.Inventory(host, nil, log)
		m.gpuOff = fmt.Sprintf("NVML did not start (%v) and the GPU probe is disabled: GPU inventory is off", openErr)
	}
	return m, nil
}
