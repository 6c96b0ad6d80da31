//go:build !linux

package network

import (
	"context"
	"errors"
)

// watchNetlink needs Linux's rtnetlink; elsewhere the probe runs only on its
// interval.
func watchNetlink(context.Context, func(), func()) error {
	return errors.New("watching network changes needs Linux netlink")
}
