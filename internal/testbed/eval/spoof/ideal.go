// SPDX-License-Identifier: Apache-2.0

package spoof

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/testbed/demo"
	"github.com/tierwall/tierwall/internal/testbed/eval/evalkit"
	"github.com/tierwall/tierwall/internal/testbed/gen"
	"github.com/tierwall/tierwall/internal/testbed/lab"
)

// idealFor says whether a scenario has an ideal-filter phase: a UDP
// flood to one destination port that the clients never use, so that the
// flood has a signature an oracle can drop from its first packet
// (reflection floods come from the ports of the host's own exchanges;
// a SYN flood's packets are the clients' own kind).
func idealFor(sc Scenario) bool {
	return sc.DstPort != 0 && !sc.SYN && len(sc.SrcPorts) == 0 && sc.PreACKs == 0
}

// idealPhase runs the flood at the victim with the ideal filter on the
// host's port instead of the defence (before the daemon attaches), the
// clients running, and fills the row's ideal rates. The clients' rate
// under it is what the host's receive path leaves them whatever the
// filter: on the lab, the 256-entry veth ring that the flood and the
// clients share, and the host CPU's NAPI.
func idealPhase(ctx context.Context, p Params, sc Scenario, row *Row, e spoofEnv) (err error) {
	// The last scenario's filter stays attached after its daemon (as
	// tierwall's does): it leaves the port to the oracle, and the next
	// daemon attaches afresh (startSpoofDaemon removes the pins anyway).
	var o *gen.Oracle
	if err := evalkit.InNS(lab.NSHost, -1, func() error {
		if err := datapath.Detach(lab.IfHost, ""); err != nil && !errors.Is(err, datapath.ErrNotAttached) {
			return fmt.Errorf("detaching the last scenario's filter: %w", err)
		}
		var err error
		o, err = gen.NewOracle(lab.IfHost, sc.DstPort)
		return err
	}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, o.Close()) }()
	if err := evalkit.PinNAPIFirst(lab.NSHost, lab.IfHost, evalkit.RxCPU); err != nil {
		return err
	}
	load := &demo.Load{Rate: p.clientRate(sc)}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	done := make(chan struct{})
	go func() { load.Run(lctx, lab.NSInet, e.url, e.others); close(done) }()
	// The clients' connections up before the flood, as in the attack
	// phase, whose clients have run through the reference.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	var (
		start   time.Time
		okStart uint64
		once    sync.Once
	)
	sent, ferr := e.flood(ctx, lab.IfInet, p.Attack, e.floodRate, func(t time.Time) {
		once.Do(func() { start, okStart = t, load.OK.Load() })
	})
	end, okEnd := time.Now(), load.OK.Load()
	lcancel()
	<-done
	if ferr != nil {
		return fmt.Errorf("generator at the ideal filter: %w", ferr)
	}
	if start.IsZero() || !end.After(start) {
		return errors.New("generator at the ideal filter: no frame sent")
	}
	dropped, _, err := o.Counts()
	if err != nil {
		return err
	}
	row.IdealRPS = float64(okEnd-okStart) / end.Sub(start).Seconds()
	if sent > 0 {
		row.IdealReachedXDP = float64(dropped) / float64(sent)
	}
	fmt.Fprintf(p.Log, "  ideal filter: HTTP %.0f req/s, %.0f%% of the flood reached it\n", row.IdealRPS, 100*row.IdealReachedXDP)
	return nil
}
