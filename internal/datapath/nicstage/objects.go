// SPDX-License-Identifier: Apache-2.0

package nicstage

import "github.com/cilium/ebpf"

// Specs are the emulated NIC's objects as compiled, by name, for the
// kernel check (internal/datapath/kernel) to load and report on.
func Specs() map[string]func() (*ebpf.CollectionSpec, error) {
	return map[string]func() (*ebpf.CollectionSpec, error){
		"nic": loadNic, "nic_egress": loadNic_egress, "nicflow": loadNicflow,
	}
}
