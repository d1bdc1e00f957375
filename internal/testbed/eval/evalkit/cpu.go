// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/tierwall/tierwall/internal/netnsx"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"golang.org/x/sys/unix"
)

// The lab's CPUs: the generator's, and the receiver's (the host's).
const (
	GenCPU = 0
	RxCPU  = 1
	// NICCPU runs the lab's emulated NIC stage. It shares the generator's
	// CPU on purpose: the wire and the card are outside the host, so what
	// the "hardware" drops must not cost CPU 1, where the host's NAPI, XDP
	// and nginx run. The NIC stage's throughput on CPU 0 is the lab's line
	// rate.
	NICCPU = GenCPU
)

// InNS runs f in network namespace name, its thread pinned to cpu.
func InNS(name string, cpu int, f func() error) error { return netnsx.Do(name, cpu, f) }

// PinNAPI makes the receiver's NAPI a kthread on cpu, so the generator
// and the mechanism under test never share a CPU.
func PinNAPI(ns, iface string, cpu int) error {
	if _, err := Sh("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /sys/class/net/"+iface+"/threaded"); err != nil {
		return err
	}
	return PinComm("napi/"+iface, cpu)
}

// PinNIC makes the NIC stage's NAPI a kthread on nicCPU that preempts
// everything else there (SCHED_FIFO). The generator and the clients
// share that CPU: at equal priority the generator, three times faster
// than the stage, would overflow the wire port's ring and lose two
// frames in three before the "card" saw them. A real wire loses nothing
// it carries; with the stage first, the generator sends only as fast as
// the stage takes frames, and that shared CPU's rate is the lab's line
// rate.
func PinNIC() error {
	return PinNAPIFirst(lab.NSNic, lab.IfWire, NICCPU)
}

// PinNAPIFirst pins iface's NAPI to cpu and lets it preempt every
// ordinary task there (SCHED_FIFO), as a softirq preempts user space on
// a real machine: a threaded NAPI at normal priority waits out a
// running task's slice while its 256-entry veth ring overflows.
func PinNAPIFirst(ns, iface string, cpu int) error {
	return PinNAPIAt(ns, iface, cpu, 50)
}

// PinNAPIAt is PinNAPIFirst at SCHED_FIFO priority prio.
func PinNAPIAt(ns, iface string, cpu, prio int) error {
	if err := PinNAPI(ns, iface, cpu); err != nil {
		return err
	}
	return forComm("napi/"+iface, func(pid int) error {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
		return unix.SchedSetAttr(pid, &attr, 0)
	})
}

// PinComm moves every thread whose name starts with prefix to cpu.
func PinComm(prefix string, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return forComm(prefix, func(pid int) error { return unix.SchedSetaffinity(pid, &set) })
}

// forComm runs f on every thread whose name starts with prefix.
func forComm(prefix string, f func(pid int) error) error {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		if strings.HasPrefix(strings.TrimSpace(string(comm)), prefix) {
			if err := f(pid); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: gone since listed
				return fmt.Errorf("%s: %w", strings.TrimSpace(string(comm)), err)
			}
		}
	}
	return nil
}

// CPUMark is a CPU's counters at one moment; busyPct is its busy share
// since then.
type CPUMark struct {
	cpu         int
	busy, total uint64
}

// MarkCPU notes cpu's busy and total time, for BusyPct to measure from.
func MarkCPU(cpu int) CPUMark {
	b, t := CPUTimes(cpu)
	return CPUMark{cpu, b, t}
}

// BusyPct is the share of the CPU busy since the mark, in percent.
func (m CPUMark) BusyPct() float64 {
	b, t := CPUTimes(m.cpu)
	if t <= m.total {
		return 0
	}
	return 100 * float64(b-m.busy) / float64(t-m.total)
}

// CPUTimes reads one CPU's busy and total jiffies.
func CPUTimes(cpu int) (busy, total uint64) {
	b, _ := os.ReadFile("/proc/stat")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || f[0] != "cpu"+strconv.Itoa(cpu) {
			continue
		}
		var v [8]uint64
		for i := 1; i < 9 && i < len(f); i++ {
			v[i-1], _ = strconv.ParseUint(f[i], 10, 64)
		}
		for _, x := range v {
			total += x
		}
		return total - v[3] - v[4], total // idle, iowait
	}
	return 0, 0
}

// MACOf is the hardware address of iface in namespace ns.
func MACOf(ns, iface string) ([6]byte, error) {
	var mac [6]byte
	err := InNS(ns, -1, func() error {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		mac = [6]byte(ifc.HardwareAddr)
		return nil
	})
	return mac, err
}

// PinProcess moves every thread of this process to cpu, so that its
// runtime (timers, the collector, threads made for namespaces) stays off
// the CPU whose busy share is measured; threads made later inherit it.
// The returned func gives the threads the process's previous CPUs back.
func PinProcess(cpu int) (restore func(), err error) {
	var prev unix.CPUSet
	if err := unix.SchedGetaffinity(0, &prev); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	set := func(s *unix.CPUSet) error {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, s); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pinning thread %d: %w", tid, err)
			}
		}
		return nil
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := set(&one); err != nil {
		_ = set(&prev) // the pinning error is the one to report
		return nil, err
	}
	return func() { _ = set(&prev) }, nil
}

// ProcCPU is the CPU time (user and system, all threads) process pid has
// used, in seconds; 0 when it cannot be read. /proc counts it in clock
// ticks (100 a second on Linux's every architecture here).
func ProcCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: fields count
	// from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return float64(ut+st) / 100
}
