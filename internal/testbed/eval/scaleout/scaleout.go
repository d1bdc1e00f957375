// SPDX-License-Identifier: Apache-2.0

// Package scaleout is `make eval-scaleout`: network mode's collectors
// and a detector over NATS, one collector against two, written to
// docs/EVALUATION-SCALEOUT.md and docs/eval/scaleout.json.
package scaleout

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tierwall/tierwall/internal/control/config"
	twscaleout "github.com/tierwall/tierwall/internal/control/scaleout"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	tt "github.com/tierwall/tierwall/internal/control/telemetry/telemetrytest"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/harness"
)

// The scale-out measurement (issue 36): the same replayed sFlow feed to
// one collector, then to two collectors each taking half the routers,
// each collector a process of its own publishing its aggregates to a
// nats-server on this machine, and a detector (this process) merging
// them. A rate is ingested with no loss when no socket dropped a
// datagram and every aggregate the collectors queued reached the
// detector. The two set-ups take turns at every rate, in rounds.

// Params configure the measurement; zero fields take the
// defaults in parentheses.
type Params struct {
	// Self is the tierwall-scaleout binary (its collect command).
	Self string
	// NATSServer is the server binary (nats-server).
	NATSServer string
	// Rounds of the ladder (5); Step is how long a rate is offered (2s).
	Rounds int
	Step   time.Duration
	// Rates offered, datagrams/s (5k … 240k, then as fast as the sender
	// goes).
	Rates []float64
	Log   io.Writer
}

func (p *Params) defaults() {
	if p.NATSServer == "" {
		p.NATSServer = "nats-server"
	}
	if p.Rounds <= 0 {
		p.Rounds = 5
	}
	if p.Step <= 0 {
		p.Step = 2 * time.Second
	}
	if len(p.Rates) == 0 {
		p.Rates = []float64{20e3, 40e3, 60e3, 80e3, 100e3, 120e3, 140e3, 160e3, 200e3, 240e3, evalkit.FlatOut}
	}
	if p.Log == nil {
		p.Log = io.Discard
	}
}

// CollectorStats is what a collector process prints on SIGUSR1.
type CollectorStats struct {
	Datagrams, Records, DecodeErrors uint64
	Publisher                        twscaleout.PublisherStats
	// Overflow is the records past the per-tick destination cap.
	Overflow uint64
}

// Step is one rate offered to one set-up.
type Step struct {
	Round   int     `json:"round"`
	Offered float64 `json:"offered"`
	Sent    uint64  `json:"sent"`
	Secs    float64 `json:"secs"`
	// Dropped are the sockets' drops; Decoded the datagrams the
	// collectors decoded.
	Dropped uint64 `json:"dropped"`
	Decoded uint64 `json:"decoded"`
	// Queued aggregates were handed to NATS by the collectors, Delivered
	// reached the detector; QueueDrops and PublishErrors are the
	// collectors' own losses.
	Queued        uint64 `json:"queued"`
	Delivered     uint64 `json:"delivered"`
	QueueDrops    uint64 `json:"queue_drops"`
	PublishErrors uint64 `json:"publish_errors"`
	// CPU is the CPU seconds the collectors, the server and this process
	// (the sender and the detector) used over the step and its drain.
	CPUCollectors float64 `json:"cpu_collectors"`
	CPUServer     float64 `json:"cpu_server"`
	CPUSelf       float64 `json:"cpu_self"`
}

// Lost reports any loss at the step: socket drops, aggregates dropped
// or refused by the bus, or not delivered.
func (s Step) Lost() bool {
	return s.Dropped > 0 || s.QueueDrops > 0 || s.PublishErrors > 0 || s.Delivered < s.Queued
}

// Rate is the datagrams/s sent at the step.
func (s Step) Rate() float64 {
	if s.Secs <= 0 {
		return 0
	}
	return float64(s.Sent) / s.Secs
}

// Setup is one set-up's ladder.
type Setup struct {
	Name       string `json:"name"`
	Collectors int    `json:"collectors"`
	RcvBuf     int    `json:"rcvbuf"`
	Steps      []Step `json:"steps"`
}

// NoLoss is, per round, the highest rate sent with no loss at it nor at
// any lower rate of the round (a lossless step above a lossy one is
// luck on a shared machine, not capacity).
func (s Setup) NoLoss() []float64 {
	byRound := map[int][]Step{}
	for _, st := range s.Steps {
		byRound[st.Round] = append(byRound[st.Round], st)
	}
	var out []float64
	for r := range len(byRound) {
		steps := byRound[r]
		slices.SortStableFunc(steps, func(a, b Step) int { return cmp.Compare(a.Offered, b.Offered) })
		best := 0.0
		for _, st := range steps {
			if st.Lost() || st.Secs <= 0 {
				break
			}
			best = max(best, st.Rate())
		}
		out = append(out, best)
	}
	return out
}

// Overload is, per round, the datagrams/s decoded at the highest rate
// offered (as fast as the sender goes).
func (s Setup) Overload() []float64 {
	var out []float64
	for _, st := range s.Steps {
		if st.Offered == evalkit.FlatOut && st.Secs > 0 {
			out = append(out, float64(st.Decoded)/st.Secs)
		}
	}
	return out
}

// Result is the whole run.
type Result struct {
	Setups     []Setup    `json:"setups"`
	Partitions int        `json:"partitions"`
	Feed       string     `json:"feed"`
	NATS       string     `json:"nats_version"`
	CPUs       int        `json:"cpus"`
	LoadBefore [3]float64 `json:"load_before"`
	LoadAfter  [3]float64 `json:"load_after"`
	// Took is how long the run took, At when it ended.
	Took time.Duration `json:"took"`
	At   time.Time     `json:"at"`
}

const scaleoutPartitions = 16

// scaleoutFeed is n sFlow datagrams of six samples (sampling 1) to the
// 4,096 addresses of netIngest, from two routers (sub-agents 0 and 1 of
// one agent, alternating, each with its own sequence): "two" sends each
// router's to its own collector, so neither sees a sequence gap.
func scaleoutFeed(n int) [][]byte {
	r := rand.New(rand.NewPCG(36, 3))
	seq := [2]uint32{}
	var out [][]byte
	for i := range n {
		sub := i % 2
		seq[sub]++
		s := tt.SFlow{Agent: evalkit.Loopback, SubAgent: uint32(sub), Sequence: seq[sub]}
		for range 6 {
			s.Flow(1, tt.Packet{Src: evalkit.RandSrc(r), Dst: evalkit.RandIn(r, evalkit.IngestPrefix), Proto: 17, SrcPort: 443, DstPort: uint16(1024 + r.IntN(60000)), Length: uint16(64 + r.IntN(1400))})
		}
		out = append(out, s.Bytes())
	}
	return out
}

// collectorProc is one tierwall-scaleout collect process.
type collectorProc struct {
	*evalkit.Proc
	port uint16
}

// collectorStats asks for the counters and waits for the line.
func (c *collectorProc) stats() (CollectorStats, error) {
	n := len(c.Lines())
	if err := c.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return CollectorStats{}, fmt.Errorf("asking the collector for its counters: %w", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ls := c.Lines()
		for _, l := range ls[min(n, len(ls)):] {
			var st CollectorStats
			if json.Unmarshal([]byte(l), &st) == nil {
				return st, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return CollectorStats{}, errors.New("the collector did not print its counters")
}

// startUnpinned runs a command with its standard output's lines kept:
// unlike start, not pinned, since the point is how collectors use the
// machine's CPUs.
func startUnpinned(ctx context.Context, name string, args []string, log io.Writer) (*evalkit.Proc, error) {
	return evalkit.StartCmd(exec.CommandContext(ctx, name, args...), name, log)
}

// cpuSecs is a process's user and system CPU time (/proc/PID/stat).
func cpuSecs(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ is 100 on Linux
}

// startNATSServer runs nats-server with JetStream on a free loopback
// port, its store in dir.
func startNATSServer(ctx context.Context, bin, dir string, log io.Writer) (*evalkit.Proc, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pr, err := startUnpinned(ctx, bin, []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir}, log)
	if err != nil {
		return nil, "", err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return pr, url, nil
		}
		if time.Now().After(deadline) {
			pr.Stop()
			return nil, "", fmt.Errorf("nats-server on %s: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// collectorsConfig is the collectors' configuration: one exporter,
// thresholds no feed reaches (the measurement is the ingest). Each
// collector listens where its --listen says, not on the file's address.
func collectorsConfig() *config.Config {
	return evalkit.CollectorConfig("127.0.0.1:6343", []config.TelemetryExporter{{Address: "127.0.0.1", Name: "r"}}, 1e12)
}

// setup is one set-up's processes and its detector.
type setup struct {
	res  *Setup
	cols []*collectorProc
	cons *twscaleout.Consumer
}

// Run runs the measurement.
func Run(ctx context.Context, p Params) (Result, error) {
	p.defaults()
	res := Result{Partitions: scaleoutPartitions, CPUs: runtime.NumCPU(), LoadBefore: evalkit.LoadAvg(),
		Feed: "sFlow v5, 6 samples a datagram at 1:1, 4,096 destinations (a /20), two routers"}
	if v, err := exec.Command(p.NATSServer, "--version").Output(); err == nil {
		res.NATS = strings.TrimSpace(string(v))
	}
	dir, err := os.MkdirTemp("", "tierwall-eval-scaleout-")
	if err != nil {
		return res, fmt.Errorf("making a directory: %w", err)
	}
	defer os.RemoveAll(dir)
	// The server's banner and notices are not the run's log.
	srv, url, err := startNATSServer(ctx, p.NATSServer, filepath.Join(dir, "nats"), io.Discard)
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	nc, err := twscaleout.Connect(url, "eval-scaleout-detector", twscaleout.Auth{})
	if err != nil {
		return res, err
	}
	defer nc.Close()
	cfgFile := filepath.Join(dir, "tierwall.yaml")
	if err := harness.WriteConfig(cfgFile, collectorsConfig()); err != nil {
		return res, fmt.Errorf("writing the collectors' configuration: %w", err)
	}
	ports, err := evalkit.FreeUDPPorts(3)
	if err != nil {
		return res, err
	}
	pt := twscaleout.Partitioner{N: scaleoutPartitions}
	var setups []*setup
	for i, s := range []struct {
		name  string
		ports []uint16
	}{{"one collector", ports[:1]}, {"two collectors", ports[1:]}} {
		su := &setup{res: &Setup{Name: s.name, Collectors: len(s.ports)}}
		stream := fmt.Sprintf("S%d", i)
		for j, port := range s.ports {
			pr, err := startUnpinned(ctx, p.Self, []string{"collect", "--config", cfgFile, "--nats", url, "--name", fmt.Sprintf("%s-%d", stream, j),
				"--partitions", strconv.Itoa(scaleoutPartitions), "--stream", stream, "--subject", strings.ToLower(stream),
				"--listen", fmt.Sprintf("127.0.0.1:%d", port)}, p.Log)
			if err != nil {
				return res, err
			}
			defer pr.Stop()
			su.cols = append(su.cols, &collectorProc{Proc: pr, port: port})
			deadline := time.Now().Add(10 * time.Second)
			for !evalkit.Listening(port) {
				if time.Now().After(deadline) {
					return res, fmt.Errorf("collector %s-%d did not listen on %d", stream, j, port)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		su.res.RcvBuf = evalkit.RcvBuf(s.ports[0])
		su.cons, err = twscaleout.Consume(ctx, nc, twscaleout.DetectorConfig{Partitioner: pt,
			Stream: twscaleout.StreamConfig{Name: stream, Subject: strings.ToLower(stream)}, Replay: -1},
			telemetry.NewDetector(telemetry.DetectorConfig{}), nil)
		if err != nil {
			return res, err
		}
		defer su.cons.Close()
		setups = append(setups, su)
	}
	// The sender runs at normal priority (eval-network's ingest does the
	// same): at SCHED_FIFO, a sender that cannot keep up with a rate
	// would take a whole CPU from the collectors of a 2-CPU machine.
	feed := scaleoutFeed(4096)
	for round := range p.Rounds {
		for _, rate := range p.Rates {
			for _, su := range setups {
				st, err := scaleoutStep(ctx, su, srv.Cmd.Process.Pid, feed, rate, p.Step)
				if err != nil {
					return res, err
				}
				st.Round = round
				su.res.Steps = append(su.res.Steps, st)
				fmt.Fprintf(p.Log, "eval-scaleout: round %d, %s at %.0f/s: sent %d in %.2f s (%.0f/s), dropped %d, aggregates queued %d, delivered %d, lost %d, CPU s: collectors %.2f, server %.2f, sender and detector %.2f\n",
					round, su.res.Name, rate, st.Sent, st.Secs, st.Rate(), st.Dropped, st.Queued, st.Delivered, st.QueueDrops+st.PublishErrors, st.CPUCollectors, st.CPUServer, st.CPUSelf)
			}
		}
	}
	for _, su := range setups {
		res.Setups = append(res.Setups, *su.res)
	}
	res.LoadAfter = evalkit.LoadAvg()
	return res, ctx.Err()
}

// scaleoutStep offers rate datagrams/s of feed to su's collectors for d
// (datagram i to collector i mod n: each its router), waits for their
// sockets and the bus to drain, and reads every counter's change.
func scaleoutStep(ctx context.Context, su *setup, server int, feed [][]byte, rate float64, d time.Duration) (Step, error) {
	st := Step{Offered: rate}
	sum := func() (CollectorStats, uint64, float64, error) {
		var tot CollectorStats
		var drops uint64
		var cpu float64
		for _, c := range su.cols {
			s, err := c.stats()
			if err != nil {
				return tot, 0, 0, err
			}
			tot.Datagrams += s.Datagrams
			tot.Publisher.Aggregates += s.Publisher.Aggregates
			tot.Publisher.Dropped += s.Publisher.Dropped
			tot.Publisher.Errors += s.Publisher.Errors
			drops += evalkit.UDPDrops(c.port)
			cpu += cpuSecs(c.Cmd.Process.Pid)
		}
		return tot, drops, cpu, nil
	}
	before, drops0, cpu0, err := sum()
	if err != nil {
		return st, err
	}
	del0 := su.cons.Stats().Aggregates
	srv0, self0 := cpuSecs(server), cpuSecs(os.Getpid())
	addrs := make([]netip.AddrPort, len(su.cols))
	for i, c := range su.cols {
		addrs[i] = netip.AddrPortFrom(evalkit.Loopback, c.port)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: evalkit.Loopback.AsSlice()})
	if err != nil {
		return st, fmt.Errorf("opening the replay socket: %w", err)
	}
	defer conn.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := time.Now()
	per := rate / 1000
	due := 0.0
	for ms := 1; time.Since(t0) < d; ms++ {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		due += per
		for ; due >= 1; due-- {
			i := st.Sent % uint64(len(feed))
			if _, err := conn.WriteToUDPAddrPort(feed[i], addrs[i%uint64(len(addrs))]); err != nil {
				return st, fmt.Errorf("replaying: %w", err)
			}
			st.Sent++
		}
		if w := time.Until(t0.Add(time.Duration(ms) * time.Millisecond)); w > 0 {
			time.Sleep(w)
		}
	}
	st.Secs = time.Since(t0).Seconds()
	// Drain: the sockets' queues, the last tick's flush, the bus.
	for i := 0; i < 100; i++ {
		queued := uint64(0)
		for _, c := range su.cols {
			queued += evalkit.UDPQueued(c.port)
		}
		if queued == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	var after CollectorStats
	var drops1 uint64
	var cpu1 float64
	for i := 0; i < 30; i++ {
		if after, drops1, cpu1, err = sum(); err != nil {
			return st, err
		}
		if su.cons.Stats().Aggregates-del0 >= after.Publisher.Aggregates-before.Publisher.Aggregates {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	st.Dropped = drops1 - drops0
	st.Decoded = after.Datagrams - before.Datagrams
	st.Queued = after.Publisher.Aggregates - before.Publisher.Aggregates
	st.Delivered = su.cons.Stats().Aggregates - del0
	st.QueueDrops = after.Publisher.Dropped - before.Publisher.Dropped
	st.PublishErrors = after.Publisher.Errors - before.Publisher.Errors
	st.CPUCollectors = cpu1 - cpu0
	st.CPUServer = cpuSecs(server) - srv0
	st.CPUSelf = cpuSecs(os.Getpid()) - self0
	return st, nil
}
