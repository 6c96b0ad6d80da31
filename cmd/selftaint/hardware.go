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

// conditionsOf is the conditions specs feed.
func conditionsOf(specs []agent.ProbeSpec) []corev1.NodeConditionType {
	out := make([]corev1.NodeConditionType, len(specs))
	for i, s := range specs {
		out[i] = s.Condition
	}
	return out
}

// openMachine builds the probes and inventory the config asks for. NVML is
// opened only when the GPU probe or GPU inventory can use it; without the
// driver library GPU support is off and that is said once, in gpuOff, and
// logged by the caller: the agent runs normally.
func openMachine(cfg *config.Config, host probes.Host, log *slog.Logger) (*machine, error) {
	specs, err := cfg.ProbeSpecs(host, apiServerFromEnv())
	if err != nil {
		return nil, err
	}
	checks, err := cfg.CheckProbeSpecs(log)
	if err != nil {
		return nil, err
	}
	specs = append(specs, checks...)
	m := &machine{specs: specs, ownership: cfg.Ownership(conditionsOf(checks)), close: func() {}}
	lib, err := hardware.OpenNVML(cfg.Hardware.NVML.LibraryPath)
	switch {
	case err == nil:
	case errors.Is(err, hardware.ErrNVMLNotFound), errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED):
		m.gpuOff = fmt.Sprintf("no NVIDIA driver (%v): GPU probe and GPU inventory are off", err)
		lib = nil
	default:
		m.gpuOff = fmt.Sprintf("NVML failed to start (%v): GPU probe and GPU inventory are off", err)
		lib = nil
	}
	gpuSpecs, monitor, err := cfg.GPUProbeSpecs(lib)
	if err != nil {
		if lib != nil {
			_ = hardware.ShutdownNVML(lib)
		}
		return nil, err
	}
	m.specs = append(m.specs, gpuSpecs...)
	m.inventory = cfg.Inventory(host, lib, log)
	if lib != nil {
		m.close = func() {
			if monitor != nil {
				if err := monitor.Close(); err != nil {
					log.Warn("closing the GPU monitor", "err", err)
				}
			}
			if err := hardware.ShutdownNVML(lib); err != nil {
				log.Warn("shutting NVML down", "err", err)
			}
		}
	}
	return m, nil
}
