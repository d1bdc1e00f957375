// SPDX-License-Identifier: Apache-2.0

// Package netnsx runs code inside a named network namespace. Go switches
// namespaces per OS thread, so f runs on a fresh goroutine locked to its
// thread; the thread is never unlocked and dies with the goroutine rather
// than go back to Go's pool in the wrong namespace. What f opens by name
// (interfaces, sockets, pins tagged by namespace) belongs to that
// namespace; file descriptors it returns work from any thread.
package netnsx

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs f in namespace name ("" runs it in place), on CPU cpu when cpu
// is 0 or more.
func Do(name string, cpu int, f func() error) error {
	if name == "" && cpu < 0 {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if cpu >= 0 {
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errc <- fmt.Errorf("pinning to CPU %d: %w", cpu, err)
				return
			}
		}
		if name != "" {
			orig, err := netns.Get()
			if err != nil {
				errc <- fmt.Errorf("this thread's network namespace: %w", err)
				return
			}
			defer orig.Close()
			h, err := netns.GetFromName(name)
			if err != nil {
				errc <- fmt.Errorf("network namespace %q: %w", name, err)
				return
			}
			defer h.Close()
			if err := netns.Set(h); err != nil {
				errc <- fmt.Errorf("entering network namespace %q: %w", name, err)
				return
			}
			// Go does not end a locked main thread with its goroutine: it
			// parks it, still inside name, and then the whole process
			// counts as inside (ip netns pids reads the main thread's
			// namespace). Going back is cheap; if it fails, the thread
			// stays locked and ends as before.
			defer func() { _ = netns.Set(orig) }()
		}
		errc <- f()
	}()
	return <-errc
}
