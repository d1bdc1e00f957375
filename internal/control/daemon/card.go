// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/placement"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/tier"
)

// cardTier is the NIC's table as the loop uses it: placement's offloader
// owns what is in it (the one owner of a source's tier), this stage the
// loop's calls on it. The zero value is a host without a hardware tier,
// whose bans are all in XDP.
type cardTier struct {
	table   tier.Table // the daemon only reads its capabilities and counters
	off     *placement.Offloader
	updates uint64 // hardware updates placement applied
}

// newCardTier wraps table (nil: XDP only); counted is the table as the
// offloader is to drive it (with the metrics' counting of its calls).
func newCardTier(cfg *config.Config, table, counted tier.Table) cardTier {
	if table == nil {
		return cardTier{}
	}
	return cardTier{table: table, off: &placement.Offloader{Table: counted, Params: placement.Params{K: cfg.Hardware.Capacity,
		MaxRate: cfg.Hardware.MaxRate, Interval: cfg.Interval, UpdateLatency: cfg.Hardware.Latency}}}
}

// present says whether there is a hardware tier.
func (c *cardTier) present() bool { return c.off != nil }

// tierOf is where the ban on p is enforced, as the offloader knows it:
// "hw" or "xdp".
func (c *cardTier) tierOf(p netip.Prefix) string {
	if c.off != nil && p.IsSingleIP() && c.off.InHardware(p.Addr()) {
		return "hw"
	}
	return "xdp"
}

// occupancy is how many sources the card's table holds.
func (c *cardTier) occupancy() int {
	if c.off == nil {
		return 0
	}
	return c.off.Occupancy()
}

// evict takes the source of a lifted ban out of the card and out of
// placement's accounts; prefixes never reach the card.
func (c *cardTier) evict(p netip.Prefix) error {
	if c.off == nil || !p.IsSingleIP() {
		return nil
	}
	err := c.off.Evict(context.Background(), p.Addr())
	c.off.Forget(p.Addr())
	return err
}

// rates is placement's reading of both tiers for the sources it manages:
// ctrs are the XDP counters of the bans ps (parallel). nil without a card.
func (c *cardTier) rates(now time.Time, ps []netip.Prefix, ctrs []datapath.Reading) (map[netip.Addr]float64, error) {
	if c.off == nil {
		return nil, nil
	}
	counted := make([]placement.Counted, 0, len(ctrs))
	for i, r := range ctrs {
		if r.Found && ps[i].IsSingleIP() {
			counted = append(counted, placement.Counted{Src: ps[i].Addr(), Packets: r.Packets})
		}
	}
	hw, err := c.off.Measure(context.Background(), now, counted)
	if err != nil {
		return nil, fmt.Errorf("reading hardware counters: %w", err)
	}
	return hw, nil
}

// place runs Listing 1 over the rates read and applies its plan.
func (c *cardTier) place() (*placement.Report, error) {
	rep, err := c.off.Place(context.Background())
	if err != nil {
		return rep, err
	}
	c.updates += uint64(rep.Applied)
	return rep, nil
}

// view is the tier for the API, its verdicts not yet read.
func (c *cardTier) view() *apiv1.HWTier {
	caps := c.table.Caps()
	return &apiv1.HWTier{Backend: caps.Backend, Iface: caps.Iface, Capacity: caps.Capacity, Occupancy: c.off.Occupancy(), Counters: caps.Counters,
		UpdateLatency: c.off.Latency().String(), MaxRate: c.off.Params.MaxRate, Updates: c.updates, Verdicts: map[string]tier.Counters{}}
}

// name says the tier in a line of the log.
func (c *cardTier) name() string {
	if c.table == nil {
		return "none (XDP only)"
	}
	caps := c.table.Caps()
	return fmt.Sprintf("%s on %s, K=%d", caps.Backend, caps.Iface, caps.Capacity)
}
