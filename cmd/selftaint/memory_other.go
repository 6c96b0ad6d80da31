//go:build !linux

package main

import "log/slog"

// shedExecutable does nothing where there is no MADV_PAGEOUT.
func shedExecutable(logger *slog.Logger) {
	logger.Debug("shed start-up memory: not supported on this system; nothing shed")
}

// redropExecutable does nothing where there is no shed.
func redropExecutable(*slog.Logger) {}
