// SPDX-License-Identifier: Apache-2.0

// Package kernel says what the running kernel gives tierwall: the BPF
// features each part needs, probed as bpftool feature probes them, and
// whether every program of the product loads, with the instructions the
// verifier walked for it. Verifiers differ between kernels (6.1 refuses
// what 6.18 takes), so this is the one place that answers "does it run
// here" before anything is attached: `tierwall doctor` prints it, the
// daemon logs the missing features at start, and the kernel-VM test
// (scripts/vmtest.sh) runs it on each kernel Debian 12 ships.
package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/tierwall/tierwall/internal/datapath"
	probexdp "github.com/tierwall/tierwall/internal/probe/xdp"
	synproxyxdp "github.com/tierwall/tierwall/internal/synproxy/xdp"
	"github.com/tierwall/tierwall/internal/tier/nicstage"
)

// ComplexityLimit is the verifier's limit on instructions walked for one
// program (BPF_COMPLEXITY_LIMIT_INSNS, since 5.2).
const ComplexityLimit = 1_000_000

// Feature is one thing a part of tierwall needs from the kernel.
type Feature struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// For says which part needs it and what happens without it.
	For    string `json:"for"`
	Detail string `json:"detail,omitempty"`
}

// Program is one program of the product's objects, loaded or refused.
type Program struct {
	Object string `json:"object"`
	Name   string `json:"name"`
	Loaded bool   `json:"loaded"`
	// Verified is the number of instructions the verifier walked
	// (0 where the kernel does not report it, before 5.16).
	Verified uint32 `json:"verified_insns,omitempty"`
	// Degraded names the missing feature that explains a refusal; such
	// a program's part is off on this kernel, the rest works.
	Degraded string `json:"degraded,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Report is what Check found.
type Report struct {
	Release  string    `json:"release"`
	Features []Feature `json:"features"`
	Programs []Program `json:"programs"`
}

// Failed are the programs refused for a reason no missing feature
// explains: on a kernel tierwall supports there are none.
func (r Report) Failed() []Program {
	var out []Program
	for _, p := range r.Programs {
		if !p.Loaded && p.Degraded == "" {
			out = append(out, p)
		}
	}
	return out
}

// Feature returns the named feature's result.
func (r Report) Feature(name string) (Feature, bool) {
	for _, f := range r.Features {
		if f.Name == name {
			return f, true
		}
	}
	return Feature{}, false
}

// Release is the running kernel's release, as uname -r prints it.
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Feature names, as Report.Features and the daemon's metric use them.
const (
	FeatXDP          = "xdp"
	FeatBTF          = "btf"
	FeatXDPLoadBytes = "helper bpf_xdp_load_bytes"
	FeatJiffies      = "helper bpf_jiffies64"
	FeatConntrack    = "kfunc bpf_xdp_ct_lookup (nf_conntrack)"
	FeatFlower       = "tc cls_flower"
)

// Features probes the kernel for what tierwall's parts use. Probing
// loads tiny programs and needs the same privileges as attaching.
func Features() []Feature {
	fs := []Feature{
		probeFeat(FeatXDP, "everything: the filter, the emulated NIC and the probe are XDP programs",
			features.HaveProgramType(ebpf.XDP)),
		probeFeat(FeatXDPLoadBytes, "the probe's DPI samples and the SYN proxy (5.18)",
			features.HaveProgramHelper(ebpf.XDP, asm.FnXdpLoadBytes)),
		probeFeat(FeatJiffies, "the in-XDP heavy-hitter detector's clock (5.5)",
			features.HaveProgramHelper(ebpf.XDP, asm.FnJiffies64)),
	}
	_, err := btf.LoadKernelSpec()
	fs = append(fs, probeFeat(FeatBTF, "kfuncs (the SYN proxy's conntrack lookup)", err))
	fs = append(fs, conntrackFeature(), moduleFeature(FeatFlower, "cls_flower",
		"the tc flower hardware backend and the probe's flower flow table"))
	return fs
}

func probeFeat(name, usedFor string, err error) Feature {
	f := Feature{Name: name, OK: err == nil, For: usedFor}
	if err != nil {
		f.Detail = err.Error()
	}
	return f
}

// conntrackFeature: the kfunc lives in nf_conntrack's BTF, so it exists
// only while the module is loaded (or built in).
func conntrackFeature() Feature {
	f := Feature{Name: FeatConntrack, For: "the SYN proxy (off without it: SYN floods are then met by the flow rules and the ladder alone)"}
	if _, err := os.Stat("/sys/module/nf_conntrack"); err != nil {
		f.Detail = "nf_conntrack is not loaded (modprobe nf_conntrack)"
		return f
	}
	f.OK = true
	return f
}

// moduleFeature: loaded, built in, or there to be loaded on demand.
func moduleFeature(name, module, usedFor string) Feature {
	f := Feature{Name: name, For: usedFor}
	rel := Release()
	switch {
	case exists("/sys/module/" + module):
		f.OK, f.Detail = true, "loaded"
	case builtin(rel, module):
		f.OK, f.Detail = true, "built in"
	case len(glob(filepath.Join("/lib/modules", rel, "kernel/net/sched", module+".ko*"))) > 0:
		f.OK, f.Detail = true, "loaded on demand"
	default:
		f.Detail = "not in this kernel"
	}
	return f
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func glob(p string) []string { m, _ := filepath.Glob(p); return m }

func builtin(rel, module string) bool {
	b, err := os.ReadFile(filepath.Join("/lib/modules", rel, "modules.builtin"))
	return err == nil && strings.Contains(string(b), "/"+module+".ko\n")
}

// objects are the product's BPF objects (the testbed's generator and
// benchmark programs are checked by their own tests).
func objects() map[string]func() (*ebpf.CollectionSpec, error) {
	o := map[string]func() (*ebpf.CollectionSpec, error){
		"filter":   datapath.FilterSpec,
		"probe":    probexdp.Spec,
		"synproxy": synproxyxdp.Spec,
	}
	for k, f := range nicstage.Specs() {
		o[k] = f
	}
	return o
}

// Check probes the features and loads every program of the product (each
// with its object's maps, kept small), then unloads them: nothing stays
// in the kernel.
func Check() Report {
	r := Report{Release: Release(), Features: Features()}
	objs := objects()
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		spec, err := objs[n]()
		if err != nil {
			r.Programs = append(r.Programs, Program{Object: n, Error: fmt.Sprintf("reading the object: %v", err)})
			continue
		}
		r.Programs = append(r.Programs, loadObject(n, spec, r)...)
	}
	return r
}

// maxCheckEntries caps the hash-like maps for the check: the verifier's
// result does not depend on their size, the memory would.
const maxCheckEntries = 4096

func loadObject(object string, spec *ebpf.CollectionSpec, r Report) []Program {
	var out []Program
	progs := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		progs = append(progs, n)
	}
	sort.Strings(progs)
	for _, pn := range progs {
		s := spec.Copy()
		for _, m := range s.Maps {
			switch m.Type {
			case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash, ebpf.LRUCPUHash, ebpf.LPMTrie:
				m.MaxEntries = min(m.MaxEntries, maxCheckEntries)
			}
		}
		// Only this program: one refusal must not hide the others'.
		for other := range s.Programs {
			if other != pn {
				delete(s.Programs, other)
			}
		}
		p := Program{Object: object, Name: pn}
		coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{})
		if err != nil {
			p.Error = verifierTail(err)
			p.Degraded = explain(err, r)
		} else {
			p.Loaded = true
			if info, err := coll.Programs[pn].Info(); err == nil {
				p.Verified, _ = info.VerifiedInstructions()
			}
			coll.Close()
		}
		out = append(out, p)
	}
	return out
}

// verifierTail keeps the verifier's last lines, where it says why.
func verifierTail(err error) string {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Sprintf("%v\n%-12v", err, ve)
	}
	return err.Error()
}

// explain names the missing feature that accounts for a refusal, or "".
func explain(err error, r Report) string {
	msg := err.Error()
	if strings.Contains(msg, "bpf_xdp_ct_lookup") || strings.Contains(msg, "bpf_ct_release") {
		if f, ok := r.Feature(FeatConntrack); ok && !f.OK {
			return f.Name
		}
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		for _, f := range r.Features {
			if !f.OK && f.Name != FeatFlower {
				return f.Name
			}
		}
	}
	return ""
}
