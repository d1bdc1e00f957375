// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tierwall/tierwall/internal/bpffs"
	"github.com/tierwall/tierwall/internal/cli"
	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/datapath"
	"github.com/tierwall/tierwall/internal/rule"
)

// The CLI and the daemon must agree: a rule the CLI writes straight into a
// data plane a daemon owns is one the daemon does not know (its API, its
// state file and its metrics disagree with the data plane until it
// restarts), and a snapshot the CLI takes is an interval the daemon's
// detectors lose. So the CLI finds the daemon that owns the data plane it
// works on, from the owner record the daemon publishes (see
// daemon.Own), and goes through that daemon's API, whatever --socket says
// and whichever namespace either runs in. It changes a data plane a
// daemon owns directly only with --direct.

// plane is the data plane a command works on, and its owner.
type plane struct {
	iface string
	owner daemon.Owner
	owned bool
}

// target resolves the interface (-i, or the only one attached in this
// network namespace) and the daemon that owns its data plane.
func target() (plane, error) {
	iface, err := resolveIface()
	if err != nil {
		return plane{}, err
	}
	o, ok := daemon.OwnerOf(ownerDir, daemon.OwnerKey(g.pinRoot, iface))
	return plane{iface: iface, owner: o, owned: ok}, nil
}

// ownerDir is where daemons publish their owner records.
const ownerDir = bpffs.RunDir

// errOwned is a data plane a daemon owns that the CLI will not change
// behind its back: why, and what to do instead.
func (p plane) errOwned(why, instead string) error {
	return cli.Usage(fmt.Errorf("the data plane on %s belongs to the tierwall daemon pid %d (config %s): %s; %s, or pass --direct "+
		"to do it behind the daemon's back", p.iface, p.owner.PID, p.owner.Config, why, instead))
}

// client is the API of the daemon that owns p, nil when none does. A
// daemon that owns p but cannot be reached is an error unless --direct.
func (p plane) client() (*api.Client, error) {
	if !p.owned || g.direct {
		return nil, nil
	}
	if p.owner.Socket == "" {
		return nil, p.errOwned("it serves no API socket (api.socket is off)", "enable its API")
	}
	c, err := api.Dial(p.owner.Socket)
	if err != nil {
		return nil, p.errOwned(fmt.Sprintf("its API socket %s does not answer", p.owner.Socket), "check that it runs")
	}
	return c, nil
}

// warnDirect tells an operator who passed --direct what it does to the
// daemon that owns p.
func (p plane) warnDirect() {
	if p.owned && g.direct {
		fmt.Fprintf(os.Stderr, "tierwall: warning: --direct: the tierwall daemon pid %d owns the data plane on %s; it will not know of this change until it restarts\n",
			p.owner.PID, p.iface)
	}
}

// dialDaemon returns the typed client of the daemon that owns the data
// plane this command works on, or nil when none does (or --direct). When
// no interface is attached in this network namespace, the daemon that
// answers on --socket (if any) is the one meant. Commands that only a
// daemon can answer (flow rules, victims) and top (whose snapshots are
// the daemon's) use it.
func dialDaemon() *api.Client {
	if g.url != "" {
		c, _ := remoteDaemon()
		return c
	}
	if g.direct {
		return nil
	}
	p, err := target()
	if err == nil {
		if p.owned {
			c, _ := p.client()
			return c
		}
		if !socketGiven() {
			return nil
		}
	} else if !errors.Is(err, datapath.ErrNotAttached) {
		return nil
	}
	if g.socket == "" {
		return nil
	}
	c, err := api.Dial(g.socket)
	if err != nil {
		return nil
	}
	return c
}

// needDaemon is the API of the daemon for a command that only a daemon
// can answer (attacks, watch, flows, victims, bgp, provisional, and stats
// where nothing is attached). Every such command finds it the same way:
// the daemon that owns the data plane in this network namespace (from its
// owner record, so -n NETNS alone finds the daemon running there), else
// the one on --socket (a probe publishes no owner record, nor does a
// daemon in another namespace). what names what the daemon provides, for
// the error when none answers: a usage error, exit 2, in every command.
func needDaemon(what string) (*api.Client, error) {
	if g.url != "" {
		return remoteDaemon()
	}
	if p, err := target(); err == nil && p.owned {
		if p.owner.Socket == "" {
			return nil, p.errOwned(what+" comes from its API, and it serves no API socket (api.socket is off)", "enable its API")
		}
		c, err := api.Dial(p.owner.Socket)
		if err != nil {
			return nil, p.errOwned(fmt.Sprintf("%s comes from its API, and its API socket %s does not answer", what, p.owner.Socket), "check that it runs")
		}
		return c, nil
	}
	c, err := api.Dial(g.socket)
	if err != nil {
		return nil, errNoDaemon(what)
	}
	return c, nil
}

// errNoDaemon is what every command says when the daemon it needs is not
// found.
func errNoDaemon(what string) error {
	return cli.Usage(fmt.Errorf("%w: %s comes from the daemon (tierwall run): no daemon owns a data plane in this network namespace, "+
		"and none answers at %s (give its API socket with --socket, or its TCP API with --url and --token-file)", api.ErrNoDaemon, what, g.socket))
}

// remoteDaemon is the daemon at --url, with the token of --token-file: a
// daemon on another host (or this one) reached over its TCP API, as
// gobgp's CLI reaches gobgpd. It is the one meant whatever is attached
// here; --direct, which changes the data plane here, contradicts it.
func remoteDaemon() (*api.Client, error) {
	if g.direct {
		return nil, cli.Usage(fmt.Errorf("%w: --direct changes the data plane on this host and --url names a daemon to go through: give one", rule.ErrInvalid))
	}
	token := ""
	if g.tokenFile != "" {
		b, err := os.ReadFile(g.tokenFile)
		if err != nil {
			return nil, cli.Usage(fmt.Errorf("%w: --token-file: %v", rule.ErrInvalid, err))
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return nil, cli.Usage(fmt.Errorf("%w: --token-file %s is empty", rule.ErrInvalid, g.tokenFile))
		}
	}
	c, err := api.DialURL(g.url, token)
	if errors.Is(err, api.ErrNoDaemon) {
		return nil, cli.Usage(err)
	}
	return c, err
}

// daemonGiven reports whether the command line names the daemon to ask
// (--socket or --url), rather than leaving it to what is attached here.
func daemonGiven() bool { return socketGiven() || g.url != "" }

// socketGiven reports whether --socket was given on the command line.
func socketGiven() bool {
	f := rootCmd.PersistentFlags().Lookup("socket")
	return f != nil && f.Changed
}
