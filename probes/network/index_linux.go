package network

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// interfaceIndex is the index of interface name in this process's network
// namespace, as if_nametoindex(3) finds it: SIOCGIFINDEX on a datagram
// socket.
func interfaceIndex(name string) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("SIOCGIFINDEX %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}
