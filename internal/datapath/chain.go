// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// chainFilter makes prog the filter the NIC CPU runs for the NIC stage
// pinned under dir (replacing any earlier one atomically), or removes it
// when prog is nil.
func chainFilter(dir string, prog *ebpf.Program) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "tw_nic_cpu"), nil)
	if err != nil {
		return fmt.Errorf("%w: no NIC stage to run the filter on (%v); run tierwall nic attach first", ErrNotAttached, err)
	}
	defer m.Close()
	if prog == nil {
		if err := m.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing filter from NIC CPU: %w", err)
		}
		return nil
	}
	if err := m.Put(uint32(0), prog); err != nil {
		return fmt.Errorf("installing filter on NIC CPU: %w", err)
	}
	return nil
}
