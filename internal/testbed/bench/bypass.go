// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// BypassBenchResult is what a flow rule's known-good bypass costs a
// spoofed flood's packets, whose sources are on no list.
type BypassBenchResult struct {
	Members, Sources int
	Plain            []float64 // ns/packet: the rule without the bypass
	Sieve            []float64 // with the bypass, the known-good sieve as shipped
	Saturated        []float64 // with the bypass, every sieve bit set: each packet asks the LRU list, as before the sieve
}

// Median returns the medians in ns/packet.
func (r BypassBenchResult) Median() (plain, sieve, saturated float64) {
	return median(r.Plain), median(r.Sieve), median(r.Saturated)
}

// BenchBypass measures a drop rule on the flood's destination for
// packets from sources distinct spoofed sources (uniform), with members
// known-good sources on the list (none of them in the flood), through
// the same wrapper as BenchFilter; the feature buffers at the daemon's
// default size, as a flood fills them. Three filters, their rounds
// interleaved: the rule without the bypass, with it, and with it and
// the sieve saturated. Every packet must be dropped.
func BenchBypass(members, sources, rounds, repeat int, seed uint64) (*BypassBenchResult, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(sources)))
	all := randomAddrs4(members+sources+1, rng)
	ban, good, flood := all[:1], all[1:members+1], all[members+1:]
	g, err := newRig(ban, sampleAddrs(flood, Uniform, rng), repeat)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	load := func(r string, members []netip.Addr) (*datapath.Datapath, error) {
		// The lists at the daemon's default capacity, as in a flood.
		d, err := datapath.LoadDetached(datapath.Options{ExactCapacity4: 64, ExactCapacity6: 64, PrefixCapacity: 64, AllowCapacity: 64,
			FeatureCapacity: datapath.DefaultFeatureCapacity, KnownGoodCapacity: datapath.DefaultKnownGoodCapacity})
		if err != nil {
			return nil, err
		}
		fr, err := rule.ParseFlowRule(strings.Fields(r))
		if err == nil {
			err = d.SetFlowRules([]rule.FlowRule{fr})
		}
		if err == nil && len(members) > 0 {
			err = d.AddKnownGood(members)
		}
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("bypass bench, %q: %w", r, err)
		}
		return d, nil
	}
	plain, err := load("dst 10.0.0.2/32 proto udp drop", nil)
	if err != nil {
		return nil, err
	}
	defer plain.Close()
	sieve, err := load("dst 10.0.0.2/32 proto udp drop bypass-known-good", good)
	if err != nil {
		return nil, err
	}
	defer sieve.Close()
	saturated, err := load("dst 10.0.0.2/32 proto udp drop bypass-known-good", good)
	if err != nil {
		return nil, err
	}
	defer saturated.Close()
	if err := saturated.SaturateKnownGoodSieve(true); err != nil {
		return nil, err
	}
	if n, err := sieve.KnownGoodCount(); err != nil || n != members {
		return nil, fmt.Errorf("bypass bench: %d members on the list (%v), want %d", n, err, members)
	}
	r := &BypassBenchResult{Members: members, Sources: sources}
	for i := 0; i < rounds; i++ {
		for _, step := range []struct {
			d   *datapath.Datapath
			out *[]float64
		}{{plain, &r.Plain}, {sieve, &r.Sieve}, {saturated, &r.Saturated}} {
			ns, err := g.measure(step.d.Program(), xdpDrop)
			if err != nil {
				return nil, err
			}
			*step.out = append(*step.out, ns)
		}
	}
	return r, nil
}
