package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// rearmDelay is how long the watch waits before re-arming its triggers
// after the kernel dropped one (POLLERR), so a trigger that keeps failing
// costs one try a second, not a spin.
const rearmDelay = time.Second

// watchPSI arms the PSI triggers on the pressure file at path (one open
// file each, as the kernel wants) and calls h.fired(i) each time the
// kernel signals trigger i (POLLPRI), until ctx ends (nil). After each
// wake-up it asks h.recheck how long to wait for the next fire before
// calling h.tick (a negative duration: forever). Should the kernel drop
// the triggers (POLLERR) it re-arms them after rearmDelay and calls
// h.tick, since a fire may have been lost; it returns an error only when
// they cannot be armed. The kernel needs CONFIG_PSI (and psi not turned
// off at boot); without CAP_SYS_RESOURCE it accepts only windows that are
// a multiple of 2s. It polls in a blocking poll(2), since the runtime's
// poller does not wait for POLLPRI, and an eventfd ends the poll when ctx
// ends. h.armed, if not nil, is called once the triggers are first in
// place.
func watchPSI(ctx context.Context, path string, triggers []psiTrigger, h psiHooks) error {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("making an eventfd to stop the PSI watch: %w", err)
	}
	defer unix.Close(stop)
	// Writing to the eventfd ends the polls below. The eventfd is closed
	// only once that write is over, or will never happen.
	signalled := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(signalled)
		_, _ = unix.Write(stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	})
	defer func() {
		if !cancel() {
			<-signalled
		}
	}()

	fds, err := armPSI(path, triggers)
	if err != nil {
		return err
	}
	defer func() { closeAll(fds) }()
	if h.armed != nil {
		h.armed()
	}
	pfds := make([]unix.PollFd, len(fds)+1)
	for {
		for i, fd := range fds {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLPRI}
		}
		pfds[len(fds)] = unix.PollFd{Fd: int32(stop), Events: unix.POLLIN}
		n, err := unix.Poll(pfds, pollTimeout(h.recheck()))
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("polling the PSI triggers on %s: %w", path, err)
		}
		if pfds[len(fds)].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		if n == 0 {
			h.tick()
			continue
		}
		lost := false
		for i := range fds {
			switch ev := pfds[i].Revents; {
			case ev&unix.POLLPRI != 0:
				h.fired(i)
			case ev&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
				lost = true
			}
		}
		if !lost {
			continue
		}
		closeAll(fds)
		fds = nil
		if !sleepOrStop(stop, rearmDelay) {
			return nil
		}
		if fds, err = armPSI(path, triggers); err != nil {
			return fmt.Errorf("the kernel dropped a PSI trigger on %s (POLLERR) and re-arming failed: %w", path, err)
		}
		h.tick()
	}
}

// pollTimeout turns a recheck duration into poll(2)'s milliseconds,
// rounded up; negative is forever.
func pollTimeout(d time.Duration) int {
	if d < 0 {
		return -1
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// sleepOrStop waits d unless the eventfd stop is signalled first; it
// reports whether the whole d passed.
func sleepOrStop(stop int, d time.Duration) bool {
	pfd := []unix.PollFd{{Fd: int32(stop), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, pollTimeout(d))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

// armPSI opens the pressure file at path once per trigger and writes the
// trigger to it, returning the open files; on an error it closes what it
// opened and says which trigger failed and why.
func armPSI(path string, triggers []psiTrigger) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeAll(fds)
		}
	}()
	for _, t := range triggers {
		fd, err := armOne(path, t)
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func armOne(path string, t psiTrigger) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return -1, fmt.Errorf("opening %s: %w (the kernel has no PSI: CONFIG_PSI off or booted with psi=0)", path, err)
		}
		return -1, fmt.Errorf("opening %s to arm a PSI trigger: %w (kernels before 6.5 let only root write triggers)", path, err)
	}
	// Only the kernel's pressure files raise POLLPRI; anything else (a
	// fixture host's regular file) would leave the poll waiting forever.
	var fsys unix.Statfs_t
	if err := unix.Fstatfs(fd, &fsys); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("statfs %s: %w", path, err)
	}
	if fsys.Type != unix.PROC_SUPER_MAGIC && fsys.Type != unix.CGROUP2_SUPER_MAGIC {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is not on procfs or cgroup2 (filesystem magic %#x): not a kernel pressure file, so no PSI trigger", path, fsys.Type)
	}
	spec := t.spec()
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("arming PSI trigger %q (%s) on %s: %w (%s)", spec, t, path, err, armHint(t, err))
	}
	return fd, nil
}

// armHint says what the kernel most likely refused in trigger t.
func armHint(t psiTrigger, err error) string {
	switch {
	case errors.Is(err, unix.EINVAL) && t.Window%UnprivilegedWindowStep != 0:
		return fmt.Sprintf("a window of %v, not a multiple of %v, needs CAP_SYS_RESOURCE, which this process lacks", t.Window, UnprivilegedWindowStep)
	case errors.Is(err, unix.EOPNOTSUPP):
		return "the kernel's PSI is off (booted with psi=0)"
	case errors.Is(err, unix.EBUSY):
		return "this file already holds a trigger"
	default:
		return fmt.Sprintf("the kernel needs CONFIG_PSI, a stall of at most the window, a window of %v to %v, and without CAP_SYS_RESOURCE a window that is a multiple of %v", MinTriggerWindow, MaxTriggerWindow, UnprivilegedWindowStep)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
