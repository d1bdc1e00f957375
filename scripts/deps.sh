#!/usr/bin/env bash
# Installs what building, testing and the demo need on Debian 12, only the
# packages that are missing. Safe to run again; needs root to install.
set -euo pipefail

pkgs=(clang clang-format llvm libbpf-dev bpftool linux-libc-dev iproute2 iputils-ping ethtool gcc make git nginx-light wget wrk iptables ipset nftables xdp-tools libndpi-dev pkg-config nfdump tcpdump)
# make install and make deb need only coreutils, sed, gzip and dpkg-deb
# (in dpkg, essential); test/install also checks the unit with
# systemd-analyze and renders the man page with man.
pkgs+=(systemd man-db)
# Real BGP peers for the speaker's tests (internal/testbed/bgppeer):
# GoBGP 3.10 (gobgpd, gobgp), BIRD 2.0.12, FRR 8.4.
pkgs+=(gobgpd bird2 frr)
# Real flow exporters for network mode's tests (internal/control/telemetry):
# softflowd 1.1 (NetFlow v9, IPFIX) and pmacct 1.7 (pmacctd's sfprobe: sFlow).
pkgs+=(softflowd pmacct)
# FastNetMon Community 1.2 for make eval-network (run in the foreground
# with a private configuration, never as the system's service).
pkgs+=(fastnetmon)
# NATS (JetStream) 2.9 for network mode's scale-out (internal/control/scaleout):
# its tests and make eval-scaleout start their own server on loopback.
pkgs+=(nats-server)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${missing[*]}; run as root (or: apt-get install ${missing[*]})" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The BGP packages ship services that would hold port 179 (and FRR's
# zebra would fight over routes), fastnetmon one that would hold the
# sFlow and NetFlow ports; the tests run their own instances in
# namespaces, so the system's stay off. systemctl works only where
# systemd is PID 1 (not in containers), where the init scripts do.
if [ "$(id -u)" -eq 0 ]; then
	if [ -d /run/systemd/system ]; then
		systemctl disable --now bird frr gobgpd fastnetmon nats-server >/dev/null 2>&1 || true
	else
		for s in bird frr gobgpd fastnetmon nats-server; do
			if [ -x "/etc/init.d/$s" ]; then "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
		done
	fi
fi
if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go is not installed; tierwall needs Go >= 1.24 (go.mod pins 1.26, fetched by GOTOOLCHAIN=auto)" >&2
	exit 1
fi

# golangci-lint for make lint, pinned: bin/golangci-lint, rebuilt only when
# missing, another version, or built by another Go (it cannot load code of
# a newer Go than its own). Bump GOLANGCI_LINT_VERSION deliberately (new
# releases add checks); .golangci.yml is written for v2.
GOLANGCI_LINT_VERSION=v2.15.0
root="$(cd "$(dirname "$0")/.." && pwd)"
lint="$root/bin/golangci-lint"
have=""
if [ -x "$lint" ]; then
	have="$(go version -m "$lint" 2>/dev/null | awk 'NR == 1 { print $2 } $1 == "mod" && $2 == "github.com/golangci/golangci-lint/v2" { print $3 }' | paste -sd' ')"
fi
gover="$(cd "$root" && go env GOVERSION)" # the project's toolchain (go.mod)
if [ "$have" != "$gover $GOLANGCI_LINT_VERSION" ]; then
	echo "deps: installing golangci-lint $GOLANGCI_LINT_VERSION into bin/"
	GOTOOLCHAIN="$gover" GOBIN="$root/bin" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
fi
