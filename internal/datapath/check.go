// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tierwall/tierwall/internal/bpffs"
)

// ErrOrphaned means the maps this handle writes are no longer the ones the
// interface's filter reads: the state was detached or re-created, or the
// interface went away or came back with another index. Every write would
// vanish; the owner must re-open or exit.
var ErrOrphaned = errors.New("data plane handle orphaned")

// Check reports ErrOrphaned when this handle no longer drives the filter
// on its interface: the pinned directory is gone or holds other maps
// (detach, or detach and attach again), or the pinned link is gone or
// bound to another interface index. A handle without a link (the NIC-CPU
// mode, tests) is checked on its maps only.
func (d *Datapath) Check() error {
	if !bpffs.Exists(d.Dir) {
		return fmt.Errorf("%w: %s was removed (detached?)", ErrOrphaned, d.Dir)
	}
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(d.Dir, "tw_cfg"), nil)
	if err != nil {
		return fmt.Errorf("%w: %s has no tw_cfg: %v", ErrOrphaned, d.Dir, err)
	}
	defer pinned.Close()
	same, err := sameMap(pinned, d.maps.TwCfg)
	if err != nil {
		return fmt.Errorf("checking pinned maps: %w", err)
	}
	if !same {
		return fmt.Errorf("%w: %s holds maps of a newer attach", ErrOrphaned, d.Dir)
	}
	l, err := link.LoadPinnedLink(filepath.Join(d.Dir, bpffs.LinkPin), nil)
	if err != nil {
		return nil // no link: the NIC-CPU mode or a detached load
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil || info.XDP() == nil {
		return fmt.Errorf("%w: the pinned link of %s is unreadable: %v", ErrOrphaned, d.Iface, err)
	}
	ifc, err := net.InterfaceByName(d.Iface)
	if err != nil {
		return fmt.Errorf("%w: interface %s is gone", ErrOrphaned, d.Iface)
	}
	if int(info.XDP().Ifindex) != ifc.Index {
		return fmt.Errorf("%w: interface %s was re-created (index %d, the filter's link is on %d)", ErrOrphaned, d.Iface, ifc.Index, info.XDP().Ifindex)
	}
	return nil
}

// sameMap compares two map handles by kernel map ID.
func sameMap(a, b *ebpf.Map) (bool, error) {
	ia, err := a.Info()
	if err != nil {
		return false, err
	}
	ib, err := b.Info()
	if err != nil {
		return false, err
	}
	ida, _ := ia.ID()
	idb, _ := ib.ID()
	return ida == idb, nil
}
