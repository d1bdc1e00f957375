// SPDX-License-Identifier: Apache-2.0

// Package collector runs a real flow collector for the testbed: Debian's
// nfdump 1.7 (nfcapd receives, nfdump reads back). One copy, used by the
// exporter's end-to-end test, the probe's end-to-end tests and the
// talk's experiment (make eval-flows), so all three read back the same way.
//
// What nfdump 1.7.1 shows of what the probe sends: addresses, ports,
// protocol, TCP flags, packets, bytes, first/last (ms), and for RFC 5103
// biflows the reverse packets and bytes (out_packets, out_bytes).
// flowEndReason is kept for IPFIX but printed only by -o raw and the %end
// format element, not by -o json; nfdump reads no flowEndReason in NetFlow
// v9, nor applicationName (it knows NBAR's applicationId only), nor
// enterprise elements other than reverse ones and yaf's.
package collector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/netnsx"
)

// Nfcapd is a running nfcapd.
type Nfcapd struct {
	Addr   string // host:port it listens on (UDP)
	dir    string
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
}

// Options of Start.
type Options struct {
	Netns string // run in this network namespace ("" here); its lo must be up
	Dir   string // where nfcapd writes its file (required)
	// Bufsize is nfcapd's socket receive buffer in bytes (-B); the
	// kernel caps it at net.core.rmem_max, which callers raise.
	Bufsize int
}

// Start runs nfcapd on a free loopback port and waits until it is ready.
func Start(o Options) (*Nfcapd, error) {
	for _, n := range []string{"nfcapd", "nfdump"} {
		if _, err := exec.LookPath(n); err != nil {
			return nil, fmt.Errorf("%s not installed (scripts/deps.sh installs nfdump): %w", n, err)
		}
	}
	if o.Dir == "" {
		return nil, errors.New("nfcapd: no directory")
	}
	var port int
	// A free port in the namespace nfcapd runs in: bind, note, release.
	if err := netnsx.Do(o.Netns, -1, func() error {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = c.LocalAddr().(*net.UDPAddr).Port
		return c.Close()
	}); err != nil {
		return nil, fmt.Errorf("nfcapd: finding a free port: %w", err)
	}
	args := []string{"-C", "none", "-b", "127.0.0.1", "-p", strconv.Itoa(port), "-w", o.Dir, "-t", "3600"}
	if o.Bufsize > 0 {
		args = append(args, "-B", strconv.Itoa(o.Bufsize))
	}
	name := "nfcapd"
	if o.Netns != "" {
		args = append([]string{"netns", "exec", o.Netns, "nfcapd"}, args...)
		name = "ip"
	}
	n := &Nfcapd{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: o.Dir, cmd: exec.Command(name, args...), exited: make(chan struct{})}
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	n.cmd.Stdout = n.cmd.Stderr
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nfcapd: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(n.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			n.mu.Lock()
			n.log.WriteString(sc.Text() + "\n")
			n.mu.Unlock()
			if strings.Contains(sc.Text(), "Startup nfcapd") {
				close(ready)
			}
		}
		n.cmd.Wait()
	}()
	select {
	case <-ready:
		return n, nil
	case <-n.exited:
		return nil, fmt.Errorf("nfcapd exited: %s", n.Log())
	case <-time.After(10 * time.Second):
		n.Kill()
		return nil, fmt.Errorf("nfcapd not ready after 10 s: %s", n.Log())
	}
}

// Log is what nfcapd printed so far.
func (n *Nfcapd) Log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.TrimSpace(n.log.String())
}

// Kill stops nfcapd without waiting for its file.
func (n *Nfcapd) Kill() {
	n.cmd.Process.Kill()
	<-n.exited
}

// Stop makes nfcapd write its files and returns their paths: one per
// rotation interval it ran in (it rotates on the hour, so a run across it
// leaves two). nfcapd reads no more after SIGTERM, so the caller waits
// until the exporter's last datagrams are read (settle) first.
func (n *Nfcapd) Stop(settle time.Duration) ([]string, error) {
	time.Sleep(settle)
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		n.Kill()
		return nil, fmt.Errorf("nfcapd did not stop: %s", n.Log())
	}
	files, _ := filepath.Glob(filepath.Join(n.dir, "nfcapd.2*"))
	if len(files) == 0 {
		return nil, fmt.Errorf("nfcapd wrote no file: %s", n.Log())
	}
	return files, nil
}

// Flow is what nfdump shows of a flow.
type Flow struct {
	Src, Dst          netip.AddrPort
	Proto             uint8
	Flags             string // nfdump's "CEUAPRSF" with dots
	Packets, Bytes    uint64
	OutPkts, OutBytes uint64 // biflows: the reverse direction
	First, Last       time.Time
	Reason            int // flowEndReason (IPFIX only)
}

// Key names the flow's direction as nfdump sees it.
func (f Flow) Key() string { return fmt.Sprintf("%d %v %v", f.Proto, f.Src, f.Dst) }

// Read reads nfcapd files.
func Read(files ...string) ([]Flow, error) {
	var all []Flow
	for _, f := range files {
		fs, err := read(f)
		if err != nil {
			return nil, err
		}
		all = append(all, fs...)
	}
	return all, nil
}

// read reads an nfcapd file: -o json for the flows, and the %end format
// element, in the same order, for the end reasons json lacks.
// noFlows is what nfdump prints for a file without flows, in every output
// format (inside the brackets of its json, and with -q too): a file nfcapd
// rotated to on the hour just before it was stopped has none.
const noFlows = "No matching flows"

// nfdump runs nfdump with args and returns its output without the
// noFlows line.
func nfdump(args ...string) ([]byte, error) {
	out, err := exec.Command("nfdump", args...).Output()
	if err != nil {
		return nil, err
	}
	lines := bytes.SplitAfter(out, []byte("\n"))
	kept := lines[:0]
	for _, l := range lines {
		if string(bytes.TrimSpace(l)) != noFlows {
			kept = append(kept, l)
		}
	}
	return bytes.Join(kept, nil), nil
}

func read(file string) ([]Flow, error) {
	out, err := nfdump("-r", file, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("nfdump -o json: %w", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("nfdump's json: %w", err)
	}
	ends, err := nfdump("-q", "-N", "-r", file, "-o", "fmt:%end")
	if err != nil {
		return nil, fmt.Errorf("nfdump -o fmt:%%end: %w", err)
	}
	reasons := strings.Fields(string(ends))
	if len(reasons) != len(rows) {
		return nil, fmt.Errorf("nfdump shows %d end reasons for %d flows", len(reasons), len(rows))
	}
	num := func(r map[string]any, k string) uint64 {
		v, _ := r[k].(float64)
		return uint64(v)
	}
	str := func(r map[string]any, k string) string { s, _ := r[k].(string); return s }
	ts := func(s string) (time.Time, error) {
		return time.ParseInLocation("2006-01-02T15:04:05.000", s, time.Local)
	}
	var fs []Flow
	for i, r := range rows {
		if str(r, "type") != "FLOW" {
			continue
		}
		sa, da := str(r, "src4_addr"), str(r, "dst4_addr")
		if sa == "" {
			sa, da = str(r, "src6_addr"), str(r, "dst6_addr")
		}
		src, err1 := netip.ParseAddr(sa)
		dst, err2 := netip.ParseAddr(da)
		first, err3 := ts(str(r, "first"))
		last, err4 := ts(str(r, "last"))
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("nfdump's flow %d: %w", i, err)
		}
		f := Flow{
			Src: netip.AddrPortFrom(src, uint16(num(r, "src_port"))), Dst: netip.AddrPortFrom(dst, uint16(num(r, "dst_port"))),
			Proto: uint8(num(r, "proto")), Flags: str(r, "tcp_flags"),
			Packets: num(r, "in_packets"), Bytes: num(r, "in_bytes"), OutPkts: num(r, "out_packets"), OutBytes: num(r, "out_bytes"),
			First: first, Last: last,
		}
		f.Reason, _ = strconv.Atoi(reasons[i])
		fs = append(fs, f)
	}
	return fs, nil
}

// Totals is the sum over files' flows, from one line of counters per
// flow: cheap even for millions of flows, where -o json is not.
type Totals struct {
	Flows, Packets, Bytes uint64
}

// ReadTotals sums the flows of nfcapd files (both directions of biflows).
func ReadTotals(files ...string) (Totals, error) {
	var t Totals
	for _, f := range files {
		x, err := readTotals(f)
		if err != nil {
			return Totals{}, err
		}
		t.Flows, t.Packets, t.Bytes = t.Flows+x.Flows, t.Packets+x.Packets, t.Bytes+x.Bytes
	}
	return t, nil
}

func readTotals(file string) (Totals, error) {
	// One CSV line per flow of just the counters: small enough for a
	// few million flows, and exact (json prints the same numbers).
	out, err := nfdump("-q", "-N", "-r", file, "-o", "fmt:%pkt %byt %opkt %obyt")
	if err != nil {
		return Totals{}, fmt.Errorf("nfdump totals of %s: %w", file, err)
	}
	var t Totals
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			return Totals{}, fmt.Errorf("nfdump totals: line %q", sc.Text())
		}
		var v [4]uint64
		for i := range f {
			if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
				return Totals{}, fmt.Errorf("nfdump totals: line %q: %w", sc.Text(), err)
			}
		}
		t.Flows++
		t.Packets += v[0] + v[2]
		t.Bytes += v[1] + v[3]
	}
	return t, sc.Err()
}

// RaiseRcvbufMax lets nfcapd's socket buffer grow to n bytes: a probe
// ending a million flows at once sends faster than nfcapd writes.
func RaiseRcvbufMax(n int) error {
	cur, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err == nil {
		if v, _ := strconv.Atoi(strings.TrimSpace(string(cur))); v >= n {
			return nil
		}
	}
	return os.WriteFile("/proc/sys/net/core/rmem_max", []byte(strconv.Itoa(n)), 0o644)
}
