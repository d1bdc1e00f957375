// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/detect"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

func newWatch() *cobra.Command {
	var every time.Duration
	var once bool
	c := &cobra.Command{
		Use:   "watch",
		Short: "Live view of a running daemon: traffic per tier, bans, the hardware table and the top talkers",
		Long: `watch asks the daemon's API every --every and draws one screen, fitted to the terminal:
packets and bits per second arriving, dropped in the NIC and in XDP, passed; the bans and the
hardware table's occupancy; and the heaviest sources that passed in the daemon's last interval.
Rates are the counters' growth between two readings. Ctrl-C ends it; --once prints a single frame
(two readings --every apart) without clearing the screen.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if every < 100*time.Millisecond {
				return fmt.Errorf("%w: --every %v: at least 100ms", rule.ErrInvalid, every)
			}
			dc, err := needDaemon("watch's view")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watch(ctx, dc, cmd.OutOrStdout(), every, once)
		},
	}
	c.Flags().DurationVar(&every, "every", time.Second, "time between frames")
	c.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	return c
}

// watch draws frames until ctx ends (Ctrl-C: a clean exit, not an error).
func watch(ctx context.Context, dc *api.Client, out io.Writer, every time.Duration, once bool) error {
	prev, err := readSample(ctx, dc)
	if err != nil {
		return err
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if !once {
				fmt.Fprintln(out)
			}
			return nil
		case <-tick.C:
		}
		cur, err := readSample(ctx, dc)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w, h := termSize(out)
		lines := frame(prev, cur, w, h)
		if once {
			_, err := io.WriteString(out, strings.Join(lines, "\n")+"\n")
			return err
		}
		// Home and clear, then the frame: one write, so it never flickers
		// half drawn.
		if _, err := io.WriteString(out, "\x1b[H\x1b[2J"+strings.Join(lines, "\n")); err != nil {
			return err
		}
		prev = cur
	}
}

// sample is one reading of the daemon.
type sample struct {
	at     time.Time
	status apiv1.Status
	tiers  apiv1.Tiers
	top    []detect.Talker
}

func readSample(ctx context.Context, dc *api.Client) (*sample, error) {
	s := &sample{}
	var err error
	if s.status, err = dc.Status(ctx); err != nil {
		return nil, err
	}
	if s.tiers, err = dc.Tiers(ctx); err != nil {
		return nil, err
	}
	if s.top, err = dc.Top(ctx); err != nil {
		return nil, err
	}
	s.at = time.Now()
	return s, nil
}

// termSize is the terminal's width and height: the window size of out
// when it is a terminal, else $COLUMNS and $LINES, else 80x24.
func termSize(out io.Writer) (w, h int) {
	w, h = 80, 24
	if f, ok := out.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 && ws.Row > 0 {
			return int(ws.Col), int(ws.Row)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		w = n
	}
	if n, err := strconv.Atoi(os.Getenv("LINES")); err == nil && n > 0 {
		h = n
	}
	return w, h
}

// traffic is packets and bits per second.
type traffic struct{ pps, bps float64 }

// rates are a frame's traffic figures.
type rates struct {
	arriving, passed, xdpDrop, nicDrop traffic
	byReason                           map[string]float64 // XDP drops per reason, pps
}

// nicDrops are the hardware verdicts that drop: its table's drop rules,
// and what an overloaded NIC CPU lost.
var nicDrops = []string{"hit_drop", "nic_cpu_overload"}

// growth is what a counter gained per second; a counter that went back
// (re-attach) counts from zero.
func growth(prev, cur uint64, secs float64) float64 {
	if cur < prev {
		return float64(cur) / secs
	}
	return float64(cur-prev) / secs
}

func measure(prev, cur *sample) rates {
	r := rates{byReason: map[string]float64{}}
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 || cur.tiers.XDP == nil || prev.tiers.XDP == nil {
		return r
	}
	for v, c := range cur.tiers.XDP.Verdicts {
		p := prev.tiers.XDP.Verdicts[v]
		f := traffic{growth(p.Packets, c.Packets, secs), 8 * growth(p.Bytes, c.Bytes, secs)}
		if datapath.IsDrop(v) {
			r.xdpDrop.pps += f.pps
			r.xdpDrop.bps += f.bps
			if f.pps > 0 {
				r.byReason[v] = f.pps
			}
		} else {
			r.passed.pps += f.pps
			r.passed.bps += f.bps
		}
	}
	if ch, ph := cur.tiers.Hardware, prev.tiers.Hardware; ch != nil && ph != nil {
		for _, v := range nicDrops {
			c, p := ch.Verdicts[v], ph.Verdicts[v]
			r.nicDrop.pps += growth(p.Packets, c.Packets, secs)
			r.nicDrop.bps += 8 * growth(p.Bytes, c.Bytes, secs)
		}
	}
	r.arriving = traffic{r.xdpDrop.pps + r.passed.pps + r.nicDrop.pps, r.xdpDrop.bps + r.passed.bps + r.nicDrop.bps}
	return r
}

// frame draws one screen of at most h lines of at most w columns.
func frame(prev, cur *sample, w, h int) []string {
	r := measure(prev, cur)
	st := cur.status
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }

	add("tierwall watch  %s  every %s  %s", st.Interface, cur.at.Sub(prev.at).Round(10*time.Millisecond), cur.at.Format("15:04:05"))
	add("%-18s %10s %10s", "", "packets/s", "bits/s")
	row := func(name string, f traffic) { add("%-18s %10s %10s", name, si(f.pps), si(f.bps)) }
	row("arriving", r.arriving)
	if cur.tiers.Hardware != nil {
		row("dropped in NIC", r.nicDrop)
	}
	row("dropped in XDP", r.xdpDrop)
	row("passed", r.passed)
	if len(r.byReason) > 0 {
		reasons := make([]string, 0, len(r.byReason))
		for v := range r.byReason {
			reasons = append(reasons, v)
		}
		sort.Slice(reasons, func(i, j int) bool {
			if r.byReason[reasons[i]] != r.byReason[reasons[j]] {
				return r.byReason[reasons[i]] > r.byReason[reasons[j]]
			}
			return reasons[i] < reasons[j]
		})
		parts := make([]string, len(reasons))
		for i, v := range reasons {
			parts[i] = v + " " + si(r.byReason[v])
		}
		add("  XDP drops by reason: %s", strings.Join(parts, ", "))
	}
	state := ""
	if st.Breaker {
		state += "  CIRCUIT BREAKER OPEN"
	}
	if st.MonitorOnly {
		state += "  monitor-only"
	}
	add("bans %d%s", st.Bans, state)
	if hw := cur.tiers.Hardware; hw != nil {
		add("hardware %s on %s: %d/%d rules %s", hw.Backend, hw.Iface, hw.Occupancy, hw.Capacity, bar(hw.Occupancy, hw.Capacity, 20))
	} else {
		add("hardware: none (XDP only)")
	}
	// The talkers take the height that is left, the header included.
	if room := h - len(lines) - 2; room > 1 {
		add("")
		add("top talkers that passed in the daemon's last interval")
		top := cur.top[:min(room-1, len(cur.top))]
		// The address column is as wide as the longest address shown; the
		// SYN and destination columns go first when the width is short.
		srcW := len("SOURCE")
		for _, t := range top {
			srcW = max(srcW, len(t.Src.String()))
		}
		wide := w >= srcW+43
		if wide {
			add("%-*s %9s %9s %8s %6s %s", srcW, "SOURCE", "PPS", "BIT/S", "SYN/S", "DESTS", "BANNED")
		} else {
			add("%-*s %9s %9s %s", srcW, "SOURCE", "PPS", "BIT/S", "BANNED")
		}
		for _, t := range top {
			banned := ""
			if t.Banned {
				banned = "yes"
			}
			if wide {
				add("%-*s %9s %9s %8s %6d %s", srcW, t.Src, si(t.PPS), si(t.BPS), si(t.SYNPS), t.Dests, banned)
			} else {
				add("%-*s %9s %9s %s", srcW, t.Src, si(t.PPS), si(t.BPS), banned)
			}
		}
		if len(top) == 0 {
			add("(none)")
		}
	}
	if len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		if len(l) > w {
			l = l[:w]
		}
		lines[i] = strings.TrimRight(l, " ")
	}
	return slices.Clip(lines)
}

// si writes x with an SI suffix: 950, 12.3k, 4.56M, 1.20G.
func si(x float64) string {
	switch {
	case x >= 1e9:
		return strconv.FormatFloat(x/1e9, 'f', 2, 64) + "G"
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 2, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(x, 'f', 0, 64)
}

// bar is a gauge of n out of capacity, width cells wide.
func bar(n, capacity, width int) string {
	if capacity <= 0 {
		return ""
	}
	full := min(width, n*width/capacity)
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}
