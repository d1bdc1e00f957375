// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/probe/flowprobe"
	"github.com/tierwall/tierwall/internal/tier"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

func TestProbeEndpoints(t *testing.T) {
	cfg := config.Default()
	cfg.Role = config.RoleProbe
	cfg.Probe.Policy = map[string]string{"default": "software"}
	sw := flowtest.New(100, 10)
	nic := tiertest.NewFlowTable(10)
	p, err := probed.Assemble(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), probed.Parts{SW: sw, HW: nic})
	if err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddrPort("192.0.2.1:1234"), netip.MustParseAddrPort("192.0.2.2:53")
	for i := 0; i < 3; i++ {
		sw.Packet(flowtest.Pkt{Proto: 17, Src: src, Dst: dst, Size: 80, Mark: flow.MarkMiss})
	}
	if err := p.Engine.Flush(); err != nil {
		t.Fatal(err)
	}
	c := NewClient(unixServer(t, (&Server{P: p}).Handler()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	top, err := c.FlowTop(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := tier.NewFlowKey(17, src, dst)
	if len(top) != 1 || top[0].Key != k || top[0].Packets[0]+top[0].Packets[1] != 3 || top[0].Reason != flowprobe.EndForced {
		t.Fatalf("top %+v", top)
	}
	st, err := c.FlowStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Engine.Records != 1 || st.Software.Packets[flow.MarkMiss] != 3 || st.NIC == nil || st.NIC.Caps.Capacity != 10 {
		t.Fatalf("status %+v", st)
	}
	apps, err := c.FlowApps(ctx)
	if err != nil || len(apps) != 1 || apps[0].App != "unknown" || apps[0].Flows != 1 {
		t.Fatalf("apps %+v %v", apps, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tierwall_flow_packets_total{mark="miss"} 3`, `tierwall_flow_records_total{reason="forced"} 1`,
		`tierwall_flow_table_capacity{tier="nic"} 10`, "tierwall_flow_learn_latency_seconds_bucket"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	page, err := c.FlowRecords(ctx, 0)
	if err != nil || len(page.Records) != 1 || page.Next != 1 || page.Records[0].Key != k {
		t.Fatalf("records %+v %v", page, err)
	}
	if _, err := c.FlowTop(ctx, 0); err == nil {
		t.Error("n=0 accepted")
	}
}
