// SPDX-License-Identifier: Apache-2.0

// Command tierwall drives the tierwall data plane: attach the XDP filter
// to an interface, manage block and allow rules, read counters and the
// heaviest sources. Rules live in pinned BPF maps, so they keep working
// after this command exits.
package main

import (
	"runtime"

	"github.com/tierwall/tierwall/internal/cli"
)

func init() {
	// --netns switches the network namespace of this thread only; keep the
	// main goroutine, which does all the work, on it.
	runtime.LockOSThread()
}

func main() { cli.Main(newRoot()) }
