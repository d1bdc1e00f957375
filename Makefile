# tierwall — every target installs what it needs first (scripts/deps.sh).
GO      ?= go
BIN     := bin
export GOTOOLCHAIN ?= auto

.PHONY: all deps generate check-generated build test test-ndpi vmtest bench demo eval eval-flows eval-spoof eval-network eval-scaleout lint clean install uninstall deb

all: build

deps:
	@bash scripts/deps.sh

# C flags of every bpf2go line, there followed by -I<root>/bpf/include
# relative to its gen.go (bpf/include/README.md); make lint checks them.
BPF_CFLAGS := -O2 -g -Wall -Werror -nostdinc

# Regenerates the BPF objects and their Go bindings (committed).
generate: deps
	$(GO) generate ./internal/...

# CI: regenerating must not change what is committed.
check-generated: generate
	@git diff --exit-code --stat -- 'internal/*_bpfel.go' 'internal/*_bpfel.o' || \
		{ echo "generated BPF files differ from the committed ones: run make generate and commit" >&2; exit 1; }

build: deps
	$(GO) build -o $(BIN)/tierwall ./cmd/tierwall
	$(GO) build -o $(BIN)/tierwall-bench ./cmd/tierwall-bench
	$(GO) build -o $(BIN)/tierwall-lab ./cmd/tierwall-lab

# All tests. Privileged ones need root; with CI=true they fail instead of
# skipping. -p 1: the BPF and netns tests share the machine's namespaces.
test: build
	$(GO) vet ./...
	$(GO) test -count=1 -p 1 ./...
	@$(MAKE) --no-print-directory test-ndpi

# The nDPI classifier: cgo against libndpi-dev (scripts/deps.sh), behind a
# build tag so that the default build needs no cgo. Only internal/probe/dpi has
# tagged files; vet looks at everything as built with the tag.
NDPI_TAGS := ndpi
test-ndpi: deps
	$(GO) vet -tags $(NDPI_TAGS) ./...
	$(GO) test -count=1 -tags $(NDPI_TAGS) ./internal/probe/dpi/...

# The data plane on Debian 12's own kernels under QEMU (scripts/vmtest.sh
# installs qemu and the kernel packages): 6.1 (linux-image-amd64) with
# every data-plane suite and the end-to-end run, 6.12
# (linux-image-6.12-amd64) with every program's load and verification
# (doctor) and the real cls_flower backend; its other suites ran there
# too until CI outgrew 30 minutes. About 14 minutes under TCG.
# VMKERNELS="6.1 6.12" runs everything on both.
VMKERNELS ?= 6.1 6.12:doctor,flower
vmtest: deps
	bash scripts/vmtest.sh $(VMKERNELS)

# Its detect-drop section installs FastNetMon from Debian when missing (the
# reference it is compared with; its service kept disabled): only here,
# never in deps or test. One section alone: bin/tierwall-bench -sections NAME.
bench: build
	$(BIN)/tierwall-bench -out docs/BENCHMARKS.md

# The whole scenario on the lab, about a minute; TWDEMO_KEEP=1 keeps the lab.
demo: build
	$(BIN)/tierwall-lab demo

lint: deps
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test)" || { gofmt -l cmd internal test; exit 1; }
	@BPF_CFLAGS='$(BPF_CFLAGS)' bash scripts/check-bpf2go.sh
	clang-format --dry-run --Werror bpf/*/*.c bpf/lib/*.h
	$(BIN)/golangci-lint run ./...
	$(BIN)/golangci-lint run --build-tags $(NDPI_TAGS) ./internal/probe/dpi/...

clean:
	rm -rf $(BIN)

# The paper's evaluation (§V) on this machine: docs/EVALUATION.md and
# docs/eval/ (CSV, PNG, SVG). About 15 minutes.
eval: build
	$(BIN)/tierwall-lab eval --out docs/eval

# The flow-offload experiment of Deri et al. (HPSR 2024) on the probe lab:
# docs/EVALUATION-FLOWS.md and docs/eval/flows.* (CSV, JSON, PNG, SVG).
# About 45 minutes.
eval-flows: build
	$(BIN)/tierwall-lab eval-flows --out docs/eval

# Four times: on the machine as it is (docs/EVALUATION-SPOOF.md), then with
# a CPU-bound process on each CPU (docs/EVALUATION-SPOOF-LOAD.md), both
# again with the emulated card as the daemon's hardware tier (-CARD.md,
# -LOAD-CARD.md). About 30 minutes.
eval-spoof: build
	$(BIN)/tierwall-lab eval-spoof --out docs/eval
	$(BIN)/tierwall-lab eval-spoof --background --out docs/eval
	$(BIN)/tierwall-lab eval-spoof --card --out docs/eval
	$(BIN)/tierwall-lab eval-spoof --card --background --out docs/eval

# Network mode beside FastNetMon Community on the same synthesized sFlow,
# NetFlow v9 and IPFIX feed (issue 36): docs/EVALUATION-NETWORK.md and
# docs/eval/network.json. Needs root (taskset, loopback sockets of
# 127.0.0.0/8) and scripts/deps.sh's fastnetmon. About 7 minutes.
eval-network: build
	$(BIN)/tierwall-lab eval-network --out docs/eval

# Network mode's scale-out over NATS JetStream (nats-server from
# scripts/deps.sh): two collectors against one on the same replayed sFlow
# feed, about 5 minutes; writes docs/EVALUATION-SCALEOUT.md.
eval-scaleout: deps
	$(GO) build -o $(BIN)/tierwall-scaleout ./cmd/tierwall-lab/scaleout
	$(BIN)/tierwall-scaleout eval --out docs/eval

# Installing: the binary, the systemd unit (its ExecStart points at this
# BINDIR), the man page, completions, the dashboard and example configs
# under share/tierwall, and /etc/tierwall/tierwall.yaml only if absent.
# DESTDIR stages the tree (make deb uses it). Needs only Go, not
# scripts/deps.sh: the binary is built static (CGO_ENABLED=0), so the
# package depends on no libc.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
UNITDIR    ?= $(PREFIX)/lib/systemd/system
MANDIR     ?= $(PREFIX)/share/man
DATADIR    ?= $(PREFIX)/share/tierwall
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
SYSCONFDIR ?= /etc
DIST       := $(BIN)/dist

$(DIST)/tierwall: FORCE
	@mkdir -p $(DIST)
	CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./cmd/tierwall

install: $(DIST)/tierwall
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DATADIR) \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(SYSCONFDIR)/tierwall
	install -m 0755 $(DIST)/tierwall $(DESTDIR)$(BINDIR)/tierwall
	sed 's|@BINDIR@|$(BINDIR)|g' deploy/tierwall.service.in > $(DESTDIR)$(UNITDIR)/tierwall.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/tierwall.service
	install -m 0644 deploy/tierwall.8 $(DESTDIR)$(MANDIR)/man8/tierwall.8
	$(DIST)/tierwall completion bash > $(DESTDIR)$(BASHCOMPDIR)/tierwall
	$(DIST)/tierwall completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_tierwall
	install -m 0644 deploy/grafana-dashboard.json deploy/tierwall.yaml deploy/probe.yaml deploy/network.yaml deploy/scaleout-collector.yaml deploy/scaleout-detector.yaml $(DESTDIR)$(DATADIR)/
	@# An operator's configuration is never overwritten.
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/tierwall/tierwall.yaml ]; then \
		echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/tierwall/tierwall.yaml (the example is $(DATADIR)/tierwall.yaml)"; \
	else \
		install -m 0644 deploy/tierwall.yaml $(DESTDIR)$(SYSCONFDIR)/tierwall/tierwall.yaml; \
	fi
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# Leaves /etc/tierwall (the operator's) and /var/lib/tierwall (the bans).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tierwall $(DESTDIR)$(UNITDIR)/tierwall.service $(DESTDIR)$(MANDIR)/man8/tierwall.8 \
		$(DESTDIR)$(BASHCOMPDIR)/tierwall $(DESTDIR)$(ZSHCOMPDIR)/_tierwall
	rm -rf $(DESTDIR)$(DATADIR)
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# A Debian package from a staged install under /usr: dpkg-deb only (in
# dpkg, on every Debian), no debhelper. The version is the last commit's
# date and hash unless given (make deb DEB_VERSION=1.0.0); the binary is
# linked with it (tierwall version says it; a build from a work tree says
# only "(devel)"), through GOFLAGS, which the install's go build reads.
DEB_VERSION ?= 0.0~git$(shell git log -1 --format=%cd.%h --date=format:%Y%m%d 2>/dev/null || echo 0)
DEB_ARCH    ?= $(shell dpkg --print-architecture)
DEB_STAGE   := $(BIN)/deb/tierwall
deb:
	rm -rf $(DEB_STAGE)
	GOFLAGS='$(GOFLAGS) -ldflags=-X=github.com/tierwall/tierwall/internal/cli.version=$(DEB_VERSION)' \
		$(MAKE) --no-print-directory install DESTDIR=$(abspath $(DEB_STAGE)) PREFIX=/usr \
		ZSHCOMPDIR=/usr/share/zsh/vendor-completions
	gzip -9n $(DEB_STAGE)/usr/share/man/man8/tierwall.8
	install -d $(DEB_STAGE)/usr/share/doc/tierwall
	install -m 0644 deploy/debian/copyright $(DEB_STAGE)/usr/share/doc/tierwall/copyright
	install -d $(DEB_STAGE)/DEBIAN
	sed -e 's|@VERSION@|$(DEB_VERSION)|' -e 's|@ARCH@|$(DEB_ARCH)|' \
		-e "s|@SIZE@|$$(du -sk --exclude=DEBIAN $(DEB_STAGE) | cut -f1)|" deploy/debian/control.in > $(DEB_STAGE)/DEBIAN/control
	install -m 0644 deploy/debian/conffiles $(DEB_STAGE)/DEBIAN/
	install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm $(DEB_STAGE)/DEBIAN/
	dpkg-deb --root-owner-group -Zxz --build $(DEB_STAGE) $(BIN)/tierwall_$(DEB_VERSION)_$(DEB_ARCH).deb

FORCE:
