// SPDX-License-Identifier: Apache-2.0

// Package bgppeer runs real BGP daemons for tierwall's speaker tests:
// Debian 12's GoBGP 3.10 (gobgpd, gobgp), BIRD 2.0.12 and FRR 8.4
// (bgpd). Each runs inside a given network namespace with a generated
// configuration in a temporary directory, and is read back through its
// own CLI, decoded into one small Route type that tests compare. Close
// stops the daemon and removes its directory, so it fits t.Cleanup.
//
// What each daemon shows differs (FRR prints no traffic-rate AS, names
// well-known communities, BIRD folds FlowSpec operators into value/mask
// pairs); the decoders here bring them to one canonical text, documented
// on Route, so that one expected route is compared against all three.
package bgppeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierwall/tierwall/internal/netnsx"
)

// Family is an address family and subsequent address family.
type Family string

const (
	IPv4Unicast  Family = "ipv4-unicast"
	IPv6Unicast  Family = "ipv6-unicast"
	IPv4FlowSpec Family = "ipv4-flowspec"
	IPv6FlowSpec Family = "ipv6-flowspec"
)

// Families are all the families the daemons here are configured for.
var Families = []Family{IPv4Unicast, IPv6Unicast, IPv4FlowSpec, IPv6FlowSpec}

// Well-known communities in Route's canonical form.
const (
	Blackhole = "65535:666"   // RFC 7999
	NoExport  = "65535:65281" // RFC 1997
)

// TrafficRate is the canonical extended community of a FlowSpec
// traffic-rate action (RFC 8955 §7.3) of rate bytes per second: 0 is
// discard. The AS field is left out: FRR does not show it.
func TrafficRate(rate float32) string {
	return "traffic-rate:" + strconv.FormatFloat(float64(rate), 'g', -1, 32)
}

// Route is one route a daemon received from a peer, in one canonical form
// whatever the daemon (its own routes, such as BIRD's static FlowSpec,
// are left out).
//
// NLRI is the prefix ("192.0.2.1/32", "2001:db8::1/128") for unicast,
// and for FlowSpec its components in type order, separated by spaces,
// each a keyword and a value: "dst 10.0.0.0/24 src 192.0.2.0/24 proto =6
// dport >=80&<=81 tcp-flags =0x2 len =60 frag =0x2". Keywords: dst, src,
// proto (next header in IPv6), port, dport, sport, icmp-type, icmp-code,
// tcp-flags, len, dscp, frag, flow-label. A value is its operator terms
// in wire order, joined by "&" (AND) and "," (OR). A numeric term is an
// operator (=, !=, <, <=, >, >=) and a decimal number, or true or false;
// a bitmask term (tcp-flags, frag) is 0xV (any of V's bits set), =0xV
// (all set), !0xV (none set) or !=0xV (not all set). An IPv6 prefix
// offset other than 0 follows the prefix as "/off N".
type Route struct {
	Family  Family
	NLRI    string
	NextHop string // unicast only ("" for FlowSpec)
	// Communities are "ASN:VALUE", in numeric order (Blackhole before
	// NoExport).
	Communities []string
	// LargeCommunities (RFC 8092) are "GLOBAL:LOCAL1:LOCAL2", in numeric
	// order. FRR's FlowSpec JSON shows none (as it shows no communities).
	LargeCommunities []string
	// ExtCommunities are sorted; TrafficRate's form for traffic-rate,
	// the daemon's own text for any other.
	ExtCommunities []string
}

func (r Route) String() string {
	s := fmt.Sprintf("%s %s", r.Family, r.NLRI)
	if r.NextHop != "" {
		s += " via " + r.NextHop
	}
	if len(r.Communities) > 0 {
		s += " comm " + strings.Join(r.Communities, ",")
	}
	if len(r.LargeCommunities) > 0 {
		s += " large " + strings.Join(r.LargeCommunities, ",")
	}
	if len(r.ExtCommunities) > 0 {
		s += " ext " + strings.Join(r.ExtCommunities, ",")
	}
	return s
}

// Options configure a daemon.
type Options struct {
	Netns    string     // the namespace it runs in (required); its lo must be up
	RouterID netip.Addr // IPv4 (required)
	ASN      uint32     // its AS (required)
	// LocalAddr is where it listens and the source of its sessions
	// (default: any address of the namespace).
	LocalAddr netip.Addr
	// PeerAddr and PeerASN are its one eBGP (or iBGP, when equal to
	// ASN) neighbour: tierwall's speaker in the tests.
	PeerAddr netip.Addr
	PeerASN  uint32
	// Password turns on TCP MD5 (RFC 2385) on every session.
	Password string
	// RouteReflectorClients are iBGP neighbours (AS ASN) it reflects
	// routes to, as a fleet's route reflector does.
	RouteReflectorClients []netip.Addr
	// StaticFlowSpec are FlowSpec routes it originates, in its own
	// syntax: BIRD's flow route, "flow4 { dst 10.0.0.0/24; proto 17;
	// dport 53; }", optionally followed by a block of attribute
	// statements (without one, traffic-rate 0 is added: discard); for
	// gobgpd the arguments of gobgp global rib -a FAMILY add, starting
	// with the family: "ipv4-flowspec match destination 10.0.0.0/24
	// then discard". FRR originates no FlowSpec (Start fails).
	StaticFlowSpec []string
}

func (o *Options) check() error {
	var errs []error
	if o.Netns == "" {
		errs = append(errs, errors.New("no namespace"))
	}
	if !o.RouterID.Is4() {
		errs = append(errs, errors.New("router ID is not an IPv4 address"))
	}
	if o.ASN == 0 {
		errs = append(errs, errors.New("no ASN"))
	}
	if o.PeerAddr.IsValid() && o.PeerASN == 0 {
		errs = append(errs, errors.New("peer without ASN"))
	}
	if !o.PeerAddr.IsValid() && len(o.RouteReflectorClients) == 0 {
		errs = append(errs, errors.New("no neighbour"))
	}
	return errors.Join(errs...)
}

// neighbor is one session in the generated configurations.
type neighbor struct {
	Addr     netip.Addr
	ASN      uint32
	RRClient bool
}

func (o *Options) neighbors() []neighbor {
	var ns []neighbor
	if o.PeerAddr.IsValid() {
		ns = append(ns, neighbor{Addr: o.PeerAddr, ASN: o.PeerASN})
	}
	for _, a := range o.RouteReflectorClients {
		ns = append(ns, neighbor{Addr: a, ASN: o.ASN, RRClient: true})
	}
	return ns
}

// Peer is a running daemon.
type Peer interface {
	// Established reports whether every configured session is up.
	Established(ctx context.Context) (bool, error)
	// Sessions are the configured neighbours' states, lower case
	// ("established", "active", "idle", ...) by address.
	Sessions(ctx context.Context) (map[netip.Addr]string, error)
	// Routes are the routes of family received from peers.
	Routes(ctx context.Context, f Family) ([]Route, error)
	// Log is what the daemon printed so far.
	Log() string
	// Close stops the daemon and removes its files.
	Close() error
}

// proc is a daemon run with ip netns exec (which execs it: the pid is
// the daemon's), its output going to a log file in its directory.
type proc struct {
	name    string
	dir     string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	once    sync.Once
	err     error
}

// startProc starts bin args... in namespace ns with working directory dir.
func startProc(ns, dir, bin string, args ...string) (*proc, error) {
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("%s not installed (scripts/deps.sh installs gobgpd, bird2, frr): %w", bin, err)
	}
	p := &proc{name: filepath.Base(bin), dir: dir, logPath: filepath.Join(dir, filepath.Base(bin)+".log"), done: make(chan struct{})}
	lf, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", p.name, err)
	}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	// No Pdeathsig: it fires when the starting OS thread ends, and Go
	// ends threads that a goroutine locked (netnsx.Do), which would kill
	// the daemon mid-test. A crashed test leaves it to the namespace's
	// removal (Pair.Close kills what runs inside).
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s in %s: %w", p.name, ns, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return strings.TrimSpace(string(b))
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the daemon (SIGTERM, then SIGKILL after 5 s) and removes its
// directory.
func (p *proc) stop() error {
	var err error
	p.once.Do(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
				err = fmt.Errorf("%s ignored SIGTERM for 5 s: killed", p.name)
			}
		}
		if e := os.RemoveAll(p.dir); e != nil {
			err = errors.Join(err, e)
		}
	})
	return err
}

// waitReady polls ready until it succeeds, the daemon exits, or
// timeout.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited (%v): %s", p.name, p.err, p.Log())
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %w; log: %s", p.name, timeout, last, p.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// output runs a query command and returns its standard output.
func output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// tempDir is a fresh directory for one daemon's files. Under /tmp, not
// t.TempDir: unix socket paths must stay under 108 bytes.
func tempDir(kind string) (string, error) {
	d, err := os.MkdirTemp("", "bgppeer-"+kind+"-")
	if err != nil {
		return "", fmt.Errorf("%s directory: %w", kind, err)
	}
	return d, nil
}

// freePort is a free TCP port on 127.0.0.1 of namespace ns.
func freePort(ns string) (int, error) {
	var port int
	err := netnsx.Do(ns, -1, func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("a free port in %s: %w", ns, err)
	}
	return port, nil
}

func sortRoutes(rs []Route) []Route {
	for i := range rs {
		sortCommunities(rs[i].Communities)
		sortCommunities(rs[i].LargeCommunities)
		sort.Strings(rs[i].ExtCommunities)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].NLRI < rs[j].NLRI })
	return rs
}

// allEstablished is Established from Sessions.
func allEstablished(want []neighbor, got map[netip.Addr]string) bool {
	if len(want) == 0 {
		return false
	}
	for _, n := range want {
		if got[n.Addr] != "established" {
			return false
		}
	}
	return true
}

// WaitFor polls cond every 200 ms until it holds, or fails with what and
// cond's last error when timeout passes: tests wait for sessions and
// routes with a deadline, never a sleep.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		// A query cut by the deadline says nothing: keep the one before.
		if err != nil && ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not within %v: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitRoutes waits until p's routes of family f satisfy ok, and returns
// them (the last seen, with the error, when they never do).
func WaitRoutes(ctx context.Context, p Peer, f Family, timeout time.Duration, ok func([]Route) bool) ([]Route, error) {
	var rs []Route
	err := WaitFor(ctx, timeout, fmt.Sprintf("%s routes", f), func(ctx context.Context) (bool, error) {
		var err error
		rs, err = p.Routes(ctx, f)
		return err == nil && ok(rs), err
	})
	return rs, err
}

// Find is the route of rs with NLRI nlri.
func Find(rs []Route, nlri string) (Route, bool) {
	for _, r := range rs {
		if r.NLRI == nlri {
			return r, true
		}
	}
	return Route{}, false
}

// sortCommunities sorts "ASN:VALUE" and large "GLOBAL:LOCAL1:LOCAL2" by
// number, what a reader expects (65535:666 before 65535:65281); anything
// else after, as text.
func sortCommunities(cs []string) {
	key := func(c string) [3]uint64 {
		var k [3]uint64
		parts := strings.Split(c, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return [3]uint64{1 << 32}
		}
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 10, 32)
			if err != nil {
				return [3]uint64{1 << 32}
			}
			k[i] = v
		}
		return k
	}
	sort.SliceStable(cs, func(i, j int) bool {
		ki, kj := key(cs[i]), key(cs[j])
		for n := range ki {
			if ki[n] != kj[n] {
				return ki[n] < kj[n]
			}
		}
		return cs[i] < cs[j]
	})
}
