#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the data plane's tests on Debian 12's own kernels under QEMU (TCG:
# KVM does not run guests on these machines), as an operator on Debian 12
# would run tierwall. Each kernel boots with the host's / read-only and this
# repository read-write over 9p (test/vm/init); inside, test/vm/guest.sh
# loads the modules, runs `tierwall doctor` and the test binaries built
# here with CI=true, and the exit code comes back.
#
#   scripts/vmtest.sh                  6.1 and 6.12, every suite
#   scripts/vmtest.sh 6.1              one kernel
#   scripts/vmtest.sh 6.1 6.12:doctor,flower   suites per kernel
#   VMSUITES="doctor flower" scripts/vmtest.sh 6.12
#
# Suites: doctor (every program loads; instructions verified), datapath
# (the filter's fixture tables), nicstage, probe, synproxy, gen, flower
# (the backend against the real cls_flower), e2e (tierwall run on a veth
# pair: a flood banned in XDP, a kill survived; attach, block, detach).
#
# Kernels: "6.1" is linux-image-amd64 (bookworm's default), "6.12" is
# linux-image-6.12-amd64 (bookworm's optional newer one). Everything it
# needs is installed from Debian's packages when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(6.1 6.12)
all="${VMSUITES:-doctor datapath nicstage probe synproxy gen flower e2e}"
# kernels[i] runs ksuites[i]: "6.12:doctor,flower" names its own.
kernels=() ksuites=()
for a in "${args[@]}"; do
	k="${a%%:*}"
	s="$all"
	[ "$k" = "$a" ] || s="${a#*:}"
	kernels+=("$k")
	ksuites+=("${s//,/ }")
done
suites="$(printf '%s\n' "${ksuites[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' ')"

declare -A meta=([6.1]=linux-image-amd64 [6.12]=linux-image-6.12-amd64)
pkgs=(qemu-system-x86 busybox-static cpio xz-utils)
for k in "${kernels[@]}"; do
	[ -n "${meta[$k]:-}" ] || { echo "vmtest: unknown kernel $k (6.1 or 6.12)" >&2; exit 2; }
	pkgs+=("${meta[$k]}")
done
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	echo "vmtest: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The release of a meta-package's kernel: the linux-image-<release> it
# depends on.
release() {
	dpkg-query -W -f='${Depends}\n' "$1" | tr ',' '\n' | sed -n 's/^ *linux-image-\([^ ]*\).*/\1/p' | head -1
}

out="$root/bin/vm"
mkdir -p "$out/tests" "$root/.vm"
echo "vmtest: building the test binaries (static, CGO_ENABLED=0)"
declare -A tpkg=(
	[datapath]=./internal/datapath
	[nicstage]=./internal/tier/nicstage
	[probe]=./internal/probe/xdp
	[synproxy]=./internal/synproxy/xdp
	[gen]=./internal/testbed/gen
	[flower]=./internal/tier/flower
	[e2e]=./test/e2e
)
for s in $suites; do
	[ -n "${tpkg[$s]:-}" ] || continue
	CGO_ENABLED=0 go test -c -o "$out/tests/$s.test" "${tpkg[$s]}"
done
CGO_ENABLED=0 go build -o "$out/tierwall" ./cmd/tierwall

# One initramfs per kernel: busybox, the virtio and 9p modules this kernel
# has as modules (decompressed: busybox's insmod reads plain .ko), init.
initramfs() {
	local rel="$1" d
	d="$(mktemp -d)"
	mkdir -p "$d/bin" "$d/sbin" "$d/dev" "$d/proc" "$d/sys" "$d/newroot" "$d/lib/modules"
	cp /bin/busybox "$d/bin/"
	for a in sh mount insmod mkdir poweroff chroot cat echo sleep; do ln -sf busybox "$d/bin/$a"; done
	install -m 0755 test/vm/init "$d/init"
	install -m 0755 test/vm/modprobe "$d/sbin/modprobe"
	local m f
	for m in drivers/virtio/virtio drivers/virtio/virtio_ring drivers/virtio/virtio_pci_modern_dev \
		drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci net/9p/9pnet net/9p/9pnet_virtio \
		fs/netfs/netfs fs/fscache/fscache fs/9p/9p; do
		f="/lib/modules/$rel/kernel/$m.ko"
		if [ -e "$f" ]; then
			cp "$f" "$d/lib/modules/"
		elif [ -e "$f.xz" ]; then
			xz -dc "$f.xz" >"$d/lib/modules/$(basename "$m").ko"
		elif [ -e "$f.zst" ]; then
			zstd -qdc "$f.zst" >"$d/lib/modules/$(basename "$m").ko"
		fi
	done
	(cd "$d" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$out/initramfs-$rel.cpio.gz"
	rm -rf "$d"
}

rc=0 pass=0 nfail=0
for i in "${!kernels[@]}"; do
	k="${kernels[$i]}"
	rel="$(release "${meta[$k]}")"
	[ -n "$rel" ] && [ -e "/boot/vmlinuz-$rel" ] || { echo "vmtest: no kernel image for $k" >&2; exit 1; }
	initramfs "$rel"
	# The guest runs a copy: sh reads a script as it goes, so an edit
	# to test/vm/guest.sh during a run would shift what it executes.
	cp test/vm/guest.sh "$root/.vm/guest.sh"
	printf 'exec sh .vm/guest.sh %q\n' "${ksuites[$i]}" >"$root/.vm/cmd"
	rm -f "$root/.vm/exit"
	log="$out/$k${VMLOG:+-$VMLOG}.log" # VMLOG: a suffix, so that a second run keeps the first's log
	echo "vmtest: booting $rel (log: ${log#"$root/"})"
	start=$(date +%s)
	# -cpu max under TCG: the BPF JIT uses what the CPU model offers.
	# VMTHREAD=single runs both vCPUs on one host thread: slower, but
	# QEMU's multi-threaded TCG has crashed 6.12 (an int3 Oops in the
	# XDP dispatcher while the kernel patched it and the other vCPU ran
	# it: test runs on both CPUs at once).
	timeout "${VMTIMEOUT:-1500}" qemu-system-x86_64 -accel "tcg,thread=${VMTHREAD:-multi}" -cpu max \
		-m "${VMMEM:-2048}" -smp 2 -nographic -no-reboot -nodefaults -serial stdio \
		-kernel "/boot/vmlinuz-$rel" -initrd "$out/initramfs-$rel.cpio.gz" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs local,path="$root",mount_tag=work,security_model=none,multidevs=remap \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init WORKDIR=$root" \
		</dev/null >"$log" 2>&1 || true
	krc=$(cat "$root/.vm/exit" 2>/dev/null || echo 255)
	grep -E '^(vm:|--- FAIL|FAIL|ok |panic:)' "$log" || true
	echo "vmtest: $k ($rel): exit $krc after $(($(date +%s) - start)) s"
	[ "$krc" -eq 0 ] || rc=1
	pass=$((pass + $(grep -c '^vm: [a-z0-9]* ok' "$log" || true)))
	nfail=$((nfail + $(grep -c '^vm: [a-z0-9]* FAIL' "$log" || true)))
	# A guest that died before its suites ran counts as one failure.
	if [ "$krc" -ne 0 ] && ! grep -q '^vm: [a-z0-9]* FAIL' "$log"; then nfail=$((nfail + 1)); fi
done
# One line for CI: suites on all kernels.
echo "vmtest: $pass passed, $nfail failed"
exit $rc
