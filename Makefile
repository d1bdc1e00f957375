# tierwall — every target installs what it needs first (scripts/deps.sh).
GO      ?= go
BIN     := bin
export GOTOOLCHAIN ?= auto

.PHONY: all deps generate check-generated build test test-ndpi bench demo eval eval-flows eval-spoof lint clean

all: build

deps:
	@bash scripts/deps.sh

# C flags of every bpf2go line, there followed by -I<root>/bpf/include
# relative to its gen.go (bpf/include/README.md); make lint checks them.
BPF_CFLAGS := -O2 -g -Wall -Werror -nostdinc

# Regenerates the BPF objects and their Go bindings (committed).
generate: deps
	$(GO) generate ./internal/datapath/...

# CI: regenerating must not change what is committed.
check-generated: generate
	@git diff --exit-code --stat -- internal/datapath || \
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
# build tag so that the default build needs no cgo. Only internal/dpi has
# tagged files; vet looks at everything as built with the tag.
NDPI_TAGS := ndpi
test-ndpi: deps
	$(GO) vet -tags $(NDPI_TAGS) ./...
	$(GO) test -count=1 -tags $(NDPI_TAGS) ./internal/dpi/...

bench: build
	$(BIN)/tierwall-bench -out docs/BENCHMARKS.md

# The whole scenario on the lab, about a minute; TWDEMO_KEEP=1 keeps the lab.
demo: build
	$(BIN)/tierwall-lab demo

lint: deps
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test)" || { gofmt -l cmd internal test; exit 1; }
	@BPF_CFLAGS='$(BPF_CFLAGS)' bash scripts/check-bpf2go.sh
	clang-format --dry-run --Werror bpf/*.c bpf/lib/*.h
	$(BIN)/golangci-lint run ./...
	$(BIN)/golangci-lint run --build-tags $(NDPI_TAGS) ./internal/dpi/...

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

eval-spoof: build
	$(BIN)/tierwall-lab eval-spoof --out docs/eval
