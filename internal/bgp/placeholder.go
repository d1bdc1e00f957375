package bgp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/tierwall/tierwall/internal/config"
)

// Placeholder until the GoBGP speaker is merged: configuring bgp fails the
// start with this error rather than pretending.
type Speaker struct{}

var errUnbuilt = errors.New("the BGP speaker is not in this build")

func New(config.BGP, *slog.Logger) (*Speaker, error) { return nil, errUnbuilt }
func (*Speaker) Start(context.Context) error         { return errUnbuilt }
func (*Speaker) Stop()                               {}
func (*Speaker) Announce([]Route) (Diff, error)      { return Diff{}, errUnbuilt }
func (*Speaker) Announced() []Route                  { return nil }
func (*Speaker) Neighbors() []Neighbor               { return nil }
func (*Speaker) Received() []Remote                  { return nil }
func (*Speaker) Changed() <-chan struct{}            { return nil }
