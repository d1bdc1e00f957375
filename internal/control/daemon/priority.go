// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setNice gives every thread of the process the niceness nice. The
// control loop decides a flood's rule within one interval only if it gets
// the CPU when it wakes: on a host whose CPUs are busy with other work at
// nice 0, beside the flood's own softirq load, a loop at nice 0 waited
// for its share and one interval's work took 1.4 s of a 500 ms interval
// (issue 32: the rule reached XDP 4–6 intervals after the flood began).
// At nice -10 its weight is about ten times a nice-0 task's, and it uses a
// few percent of a CPU, so the host's work loses little.
//
// Linux keeps a niceness per thread, and a Go process already runs several
// threads at start: each one in /proc/self/task is set, and the threads
// the runtime starts later inherit it from the thread that clones them.
func setNice(nice int, log *slog.Logger) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing the process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		// The raw syscall returns 20 - nice (glibc hides it).
		if err == nil && 20-cur == nice {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			if err == unix.ESRCH {
				continue // the thread has exited
			}
			return fmt.Errorf("setting the control loop's niceness to %d (needs CAP_SYS_NICE below the current one): %w", nice, err)
		}
	}
	log.Debug("control loop niceness", "nice", nice, "threads", len(tasks))
	return nil
}
