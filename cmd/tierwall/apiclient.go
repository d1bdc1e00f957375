package main

import (
	"github.com/tierwall/tierwall/internal/api"
)

// dialDaemon returns the typed client of a running daemon, or nil when
// none answers (or --direct). The CLI goes through it when a daemon
// answers, so the daemon's bans, state file and hardware tier stay the one
// truth.
func dialDaemon() *api.Client {
	if g.direct || g.socket == "" {
		return nil
	}
	c, err := api.Dial(g.socket)
	if err != nil {
		return nil
	}
	return c
}
