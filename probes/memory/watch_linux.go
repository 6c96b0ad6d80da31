package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// watchPSI arms a PSI trigger on the pressure file at path — wake when tasks
// stall on memory ("some") for stall or more within window — and calls wake
// each time the kernel signals it (POLLPRI), until ctx ends (nil). The
// kernel needs CONFIG_PSI (and psi not turned off at boot); without
// CAP_SYS_RESOURCE it accepts only windows that are a multiple of 2s. It
// polls in a blocking poll(2), since the runtime's poller does not wait for
// POLLPRI, and an eventfd ends the poll when ctx ends. armed, if not nil,
// is called once the trigger is in place.
func watchPSI(ctx context.Context, path string, stall, window time.Duration, wake, armed func()) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("opening %s: %w (the kernel has no PSI: CONFIG_PSI off or booted with psi=0)", path, err)
		}
		return fmt.Errorf("opening %s to arm a PSI trigger: %w", path, err)
	}
	defer unix.Close(fd)
	// Only the kernel's pressure files raise POLLPRI; anything else (a
	// fixture host's regular file) would leave the poll waiting forever.
	var fsys unix.Statfs_t
	if err := unix.Fstatfs(fd, &fsys); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	if fsys.Type != unix.PROC_SUPER_MAGIC && fsys.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not on procfs or cgroup2 (filesystem magic %#x): not a kernel pressure file, so no PSI trigger", path, fsys.Type)
	}
	trigger := fmt.Sprintf("some %d %d\x00", stall.Microseconds(), window.Microseconds())
	if _, err := unix.Write(fd, []byte(trigger)); err != nil {
		return fmt.Errorf("arming PSI trigger %q on %s: %w (the kernel needs CONFIG_PSI; without CAP_SYS_RESOURCE a window that is a multiple of 2s)", trigger[:len(trigger)-1], path, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("making an eventfd to stop the PSI watch: %w", err)
	}
	defer unix.Close(stop)
	// Writing to the eventfd ends the poll below. The eventfd is closed
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
	if armed != nil {
		armed()
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("polling the PSI trigger on %s: %w", path, err)
		}
		if fds[1].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		switch ev := fds[0].Revents; {
		case ev&unix.POLLPRI != 0:
			wake()
		case ev&unix.POLLERR != 0:
			return fmt.Errorf("the PSI trigger on %s is gone (POLLERR)", path)
		}
	}
}
