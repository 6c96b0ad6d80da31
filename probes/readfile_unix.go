//go:build unix

package probes

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// ReadFile reads a whole file as os.ReadFile does, with the same errors
// (*fs.PathError, op "open" or "read"), for the small files probes read on
// every run (procfs, sysfs). It costs an open, the reads and a close:
// os.ReadFile also stats the file and registers it with the runtime's
// network poller (procfs and sysfs files are pollable: an epoll_ctl to add
// it and one to delete it), three more system calls on every read.
func ReadFile(path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	// Most of these files fit at once: /proc/meminfo is under 2 KiB.
	data := make([]byte, 0, 4096)
	for {
		n, err := unix.Read(fd, data[len(data):cap(data)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return data, nil
		}
		data = data[:len(data)+n]
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)] // grow
		}
	}
}
