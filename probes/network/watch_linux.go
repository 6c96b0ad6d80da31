package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// routeGroups are the rtnetlink multicast groups the probe listens to: link
// state, IPv4 and IPv6 addresses and routes — everything it reads.
const routeGroups = unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR |
	unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV6_ROUTE

// watchNetlink subscribes to rtnetlink's link, address and route groups in
// this process's network namespace and calls wake for every message: the
// probe reads the whole state itself, so what changed does not matter. An
// ENOBUFS (the socket's buffer overran and messages were lost) also wakes,
// as a resync, and reading goes on. subscribed, if not nil, is called once
// the socket has joined the groups. It returns nil when ctx ends.
//
// It uses golang.org/x/sys/unix rather than github.com/vishvananda/netlink:
// one socket carries all five groups, nothing is parsed, and reading simply
// continues after ENOBUFS, where that library's Link/Addr/RouteSubscribe each
// open their own socket and end their subscription on any receive error,
// ENOBUFS included, so a resync would mean re-subscribing all three.
func watchNetlink(ctx context.Context, wake, subscribed func()) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening a netlink route socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: routeGroups}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("subscribing to netlink link, address and route changes: %w", err)
	}
	// A non-blocking descriptor in an os.File goes through the runtime's
	// poller, so a read deadline ends a blocked Read when ctx ends.
	if subscribed != nil {
		subscribed()
	}
	f := os.NewFile(uintptr(fd), "netlink-route")
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		_, err := f.Read(buf)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil, errors.Is(err, unix.ENOBUFS):
			wake()
		default:
			return fmt.Errorf("reading netlink route messages: %w", err)
		}
	}
}
