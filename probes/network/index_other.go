//go:build !linux

package network

import "errors"

// interfaceIndex is for Linux only; elsewhere interfaceAddrs asks
// net.InterfaceByName.
func interfaceIndex(string) (int, error) {
	return 0, errors.New("interface indexes by ioctl are for Linux")
}
