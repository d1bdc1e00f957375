// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/pkt"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/lab"
	"github.com/tierwall/tierwall/internal/testbed/trafgen"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
	"golang.org/x/sys/unix"
)

// sinkIf is the reference phase's sink, in the internet namespace.
const sinkIf = lab.Prefix + "sink0"

// ClientNice is the lab's clients' nice value under the background load:
// the daemon's default, above the busy loops' 0.
const ClientNice = -10

// BusyLoop is the background load's command, one per CPU: a shell loop
// that never sleeps, at nice 0.
var BusyLoop = []string{"sh", "-c", "while :; do :; done"}

// startBackground starts BusyLoop pinned to each CPU; stop kills them.
func startBackground() (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
		c := exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu)}, BusyLoop...)...)
		// The loop dies with the evaluation, even one killed mid-run: an
		// orphaned loop would load every later measurement (and hold the
		// test lock it inherited).
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("background load on CPU %d: %w", cpu, err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// attachNIC attaches the lab's NIC stage: in wire mode, everything goes
// through to the host's XDP; with card, in hybrid mode, where the daemon
// places source bans and flow policers (the stage is returned for its
// counters; nil in wire mode). With syn, also the card's transmit side
// (egress, nil without). detach detaches both.
func attachNIC(syn, card bool) (stage *nicstage.Stage, egress *nicstage.Egress, detach func() error, err error) {
	mode := nicstage.Wire
	if card {
		mode = nicstage.Hybrid
	}
	var nic *nicstage.Table
	if err := evalkit.InNS(lab.NSNic, -1, func() error {
		var e error
		nic, e = nicstage.AttachTable(lab.IfWire, lab.IfHPort, nicstage.Options{Mode: mode})
		return e
	}); err != nil {
		return nil, nil, nil, err
	}
	detach = func() error {
		if egress != nil {
			egress.Close()
		}
		nic.Close()
		return evalkit.InNS(lab.NSNic, -1, func() error { return nicstage.Detach(lab.IfWire, "") })
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, detach())
		}
	}()
	if err := evalkit.PinNIC(); err != nil {
		return nil, nil, nil, err
	}
	if syn {
		// The card's transmit side: the cookie SYN-ACKs XDP sends back
		// to the flood's spoofed sources leave for the internet (dropped
		// at the NIC's host port, counted), the clients' go on to the
		// wire; a real card's wire costs the host nothing for them. It
		// is also the XDP program a veth peer needs for XDP_TX.
		if err := evalkit.InNS(lab.NSNic, -1, func() error {
			ifc, e := net.InterfaceByName(lab.IfHPort)
			if e != nil {
				return e
			}
			egress, e = nicstage.AttachEgress(ifc.Index, []netip.Prefix{lab.Net4, lab.Net6})
			return e
		}); err != nil {
			return nil, nil, nil, fmt.Errorf("the NIC's transmit side: %w", err)
		}
		// Its NAPI runs on the host's CPU, whose XDP_TX wakes it, ahead
		// of the host's receive NAPI (SCHED_FIFO 60 against 50), as a
		// driver cleans its transmit ring before it receives. On CPU 0
		// it took the clients' CPU for what no client machine pays in a
		// real network: CPU 0's kernel share rose from 15% to 33% in
		// syn-spoof-500k's flood, and under the busy loops the clients'
		// connection rate fell to 69-71% (two runs) against 86% here.
		// At the host NAPI's own priority it waited until that NAPI
		// emptied its ring, which under a flood it never did: the ring
		// to the card refused 85% of the SYN-ACKs and the clients'
		// packets among them (connection rate 40-88% on a quiet
		// machine). The host pays more for this transmit than a card's
		// DMA would cost it; what the full ring still refuses is
		// counted (Row.TxRefused). All runs 2026-12-06.
		if err := evalkit.PinNAPIAt(lab.NSNic, lab.IfHPort, evalkit.RxCPU, egressPriority); err != nil {
			return nil, nil, nil, fmt.Errorf("the NIC's transmit side: %w", err)
		}
	}
	if card {
		stage = nic.Stage()
	}
	return stage, egress, detach, nil
}

// egressPriority is the card's transmit NAPI's SCHED_FIFO priority on the
// host's CPU: above the host's receive NAPI (evalkit.PinNAPIFirst's 50).
const egressPriority = 60

// spoofFlooder runs a scenario's generators from the internet's side.
type spoofFlooder struct {
	sc               Scenario
	inetMAC, hostMAC net.HardwareAddr
	background       bool // the evaluation's background load is on
}

// run runs the generators out of iface for dur. began, if set, is told
// when the first generator sends its first frame: the flood's start,
// with the generators' set-up left out.
func (f *spoofFlooder) run(ctx context.Context, iface string, dur time.Duration, rate uint64, began func(time.Time)) (uint64, error) {
	ports := f.sc.SrcPorts
	if len(ports) == 0 {
		ports = []uint16{0}
	}
	var (
		wg   sync.WaitGroup
		sent atomic.Uint64
		gmu  sync.Mutex
		gerr error
	)
	var specs []trafgen.Spec
	for i, sp := range ports {
		spec := trafgen.Spec{Iface: iface, SrcMAC: [6]byte(f.inetMAC), DstMAC: [6]byte(f.hostMAC), Dst: f.sc.Dst, DstPort: f.sc.DstPort,
			SrcPort: sp, SYN: f.sc.SYN, Spoof: f.sc.Spoof, Duration: dur, Seed: uint64(11 + i), Rate: rate / uint64(len(ports)), Started: began}
		switch {
		case f.sc.Sources > 0:
			spec.Spoof = netip.Prefix{}
			spec.Sources, spec.Dist, spec.Base = f.sc.Sources, trafgen.Uniform, f.sc.Spoof
		case !f.sc.Spoof.IsValid():
			// Reflectors all over IPv4 (the lab's host drops its
			// ICMP answers to them: no route).
			spec.Sources, spec.Dist, spec.Spread = f.sc.Reflectors, trafgen.Uniform, true
			spec.Base = netip.MustParsePrefix("0.0.0.0/0")
			spec.Seed = uint64(11 + i)
		}
		specs = append(specs, spec)
	}
	if f.sc.ThinSpoof.IsValid() {
		specs = append(specs, trafgen.Spec{Iface: iface, SrcMAC: [6]byte(f.inetMAC), DstMAC: [6]byte(f.hostMAC), Dst: f.sc.Dst, DstPort: f.sc.DstPort,
			SYN: f.sc.SYN, Spoof: f.sc.ThinSpoof, Duration: dur, Seed: 97, Rate: f.sc.ThinRate})
	}
	for _, spec := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rep *trafgen.Report
			e := evalkit.InNS(lab.NSInet, evalkit.GenCPU, func() error {
				// The attacker's CPU is not the clients' on a real
				// network; here they share CPU 0, so the generator
				// takes only what the clients leave (nice 19, this
				// thread only), in the reference as under attack,
				// and the clients' rate measures the host, not their
				// share of CPU 0 against the generator.
				// Under the background load it keeps nice 0, as
				// the busy loops have: at 19 it would get ~1% of CPU 0
				// against them and send no flood worth the name.
				tid := unix.Gettid() // on Linux a nice value is a thread's
				nice := 19
				if f.background {
					nice = 0
				}
				// Outside evalkit.Favour's reach: it raises the
				// clients (this process) above the busy loops.
				defer evalkit.KeepNice(tid)()
				if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
					return fmt.Errorf("lowering the generator's priority: %w", err)
				}
				defer func() { _ = unix.Setpriority(unix.PRIO_PROCESS, tid, 0) }()
				var e error
				rep, e = trafgen.Run(ctx, spec)
				return e
			})
			if rep != nil {
				sent.Add(rep.Sent)
			}
			gmu.Lock()
			gerr = errors.Join(gerr, e)
			gmu.Unlock()
		}()
	}
	wg.Wait()
	return sent.Load(), gerr
}

// spoofACKs sends sc.PreACKs spoofed TCP ACKs from each of sc.Sources to
// the victim's port, from the internet namespace, paced at about 20,000
// packets/s: what a forged handshake's last step looks like without the
// first two.
func spoofACKs(sc Scenario, src, dst net.HardwareAddr) error {
	addrs, err := trafgen.Addresses(sc.Spoof, sc.Sources)
	if err != nil {
		return err
	}
	return evalkit.InNS(lab.NSInet, evalkit.GenCPU, func() error {
		ifc, err := net.InterfaceByName(lab.IfInet)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(to.Addr[:], dst)
		n := 0
		for round := 0; round < sc.PreACKs; round++ {
			for i, a := range addrs {
				f := pkt.Frame{DstMAC: [6]byte(dst), SrcMAC: [6]byte(src), Src: a, Dst: sc.Dst, Proto: pkt.ProtoTCP,
					SrcPort: uint16(20000 + i%40000), DstPort: sc.DstPort, TCPFlags: pkt.TCPFlagACK, TCPSeq: uint32(i), TCPAck: uint32(round + 1)}
				if err := unix.Sendto(fd, f.Build(), 0, to); err != nil {
					return fmt.Errorf("sending a spoofed ACK: %w", err)
				}
				if n++; n%200 == 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		return nil
	})
}
