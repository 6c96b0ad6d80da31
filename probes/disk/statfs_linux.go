package disk

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// statfs is the default Probe.Statfs: statfs(2) for the sizes, stat(2) for
// the device that identifies the filesystem. (f_fsid is no substitute: it is
// 0 on tmpfs and some other filesystems.)
func statfs(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	var sb unix.Stat_t
	if err := unix.Stat(path, &sb); err != nil {
		return Usage{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	// Block counts are in units of f_frsize; f_bsize is only the preferred
	// I/O size (equal on most Linux filesystems).
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	return Usage{
		TotalBytes:  st.Blocks * unit,
		FreeBytes:   st.Bavail * unit,
		TotalInodes: st.Files,
		FreeInodes:  st.Ffree,
		Device:      uint64(sb.Dev),
	}, nil
}
