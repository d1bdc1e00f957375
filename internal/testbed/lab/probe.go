// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The probe lab (issue: the flow probe of Deri et al. 2024), apart from the
// mitigation lab so both can exist at once:
//
//	twp-inet (generator)
//	   twp-inet0 ──veth── twp-wire   [twp-nic: emulated NIC flow stage on twp-wire;
//	                                  hits: consumed (passive) or out of twp-twin (inline)]
//	                      twp-hport ──veth── twp-host0   [twp-host: the probe's XDP tier]
//	                      twp-hret  ──veth── twp-host1   (inline: what the host forwards)
//	                      twp-twin  ──veth── twp-out0    [twp-sink: the far side of the wire]
const (
	ProbePrefix = "twp-"
	PNSInet     = ProbePrefix + "inet"
	PNSNic      = ProbePrefix + "nic"
	PNSHost     = ProbePrefix + "host"
	PNSSink     = ProbePrefix + "sink"

	PIfInet  = ProbePrefix + "inet0"
	PIfWire  = ProbePrefix + "wire"
	PIfHPort = ProbePrefix + "hport"
	PIfHost  = ProbePrefix + "host0"
	PIfHRet  = ProbePrefix + "hret"
	PIfHost1 = ProbePrefix + "host1"
	PIfTwin  = ProbePrefix + "twin"
	PIfOut   = ProbePrefix + "out0"
)

func probeNamespaces() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ProbePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

var probeLinks = [][2]string{
	{PNSInet, PIfInet}, {PNSNic, PIfWire}, {PNSNic, PIfHPort}, {PNSHost, PIfHost},
	{PNSNic, PIfHRet}, {PNSHost, PIfHost1}, {PNSNic, PIfTwin}, {PNSSink, PIfOut},
}

// ProbeUp builds the probe lab from scratch.
func ProbeUp() error {
	release, err := Hold(context.Background(), "building the probe lab", os.Stderr)
	if err != nil {
		return err
	}
	defer release()
	if err := ProbeDown(); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "netns", "add", PNSInet}, {"ip", "netns", "add", PNSNic}, {"ip", "netns", "add", PNSHost}, {"ip", "netns", "add", PNSSink},
		// No IPv6 on the lab's links: router solicitations and MLD
		// reports would be flows the generator never sent, and the
		// tests and the evaluation count packets exactly.
		{"ip", "netns", "exec", PNSInet, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "netns", "exec", PNSNic, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "netns", "exec", PNSHost, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "netns", "exec", PNSSink, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "link", "add", PIfInet, "netns", PNSInet, "type", "veth", "peer", "name", PIfWire, "netns", PNSNic},
		{"ip", "link", "add", PIfHPort, "netns", PNSNic, "type", "veth", "peer", "name", PIfHost, "netns", PNSHost},
		{"ip", "link", "add", PIfHRet, "netns", PNSNic, "type", "veth", "peer", "name", PIfHost1, "netns", PNSHost},
		{"ip", "link", "add", PIfTwin, "netns", PNSNic, "type", "veth", "peer", "name", PIfOut, "netns", PNSSink},
	}
	for _, l := range probeLinks {
		steps = append(steps, []string{"ip", "-n", l[0], "link", "set", l[1], "up"})
	}
	// The host's loopback: the probe exports to a collector beside it.
	steps = append(steps, []string{"ip", "-n", PNSHost, "link", "set", "lo", "up"})
	steps = append(steps,
		// Frames leave with complete checksums, as on a real wire.
		[]string{"ip", "netns", "exec", PNSInet, "ethtool", "-K", PIfInet, "tx", "off"},
		// A veth only takes redirected frames when its peer runs XDP
		// or NAPI: the far side of the wire has no program, so GRO
		// turns NAPI on there.
		[]string{"ip", "netns", "exec", PNSSink, "ethtool", "-K", PIfOut, "gro", "on"},
		[]string{"ip", "netns", "exec", PNSHost, "ethtool", "-K", PIfHost1, "gro", "on"},
		[]string{"ip", "netns", "exec", PNSNic, "ethtool", "-K", PIfHRet, "gro", "on"},
		[]string{"ip", "netns", "exec", PNSNic, "ethtool", "-K", PIfTwin, "gro", "on"},
	)
	for _, s := range steps {
		if err := run(s...); err != nil {
			_ = ProbeDown()
			return fmt.Errorf("probe lab up: %w", err)
		}
	}
	return nil
}

// ProbeDown removes the probe lab. Idempotent.
func ProbeDown() error {
	release, err := Hold(context.Background(), "taking the probe lab down", os.Stderr)
	if err != nil {
		return err
	}
	defer release()
	var errs []error
	for _, ns := range probeNamespaces() {
		killInside(ns)
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RxPackets reads an interface's received-packet counter.
func RxPackets(ns, ifname string) (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifname+"/statistics/rx_packets").Output()
	if err != nil {
		return 0, fmt.Errorf("reading rx_packets of %s in %s: %w", ifname, ns, err)
	}
	return strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
}
