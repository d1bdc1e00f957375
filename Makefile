# tierwall — every target installs what it needs first (scripts/deps.sh).
GO      ?= go
BIN     := bin
export GOTOOLCHAIN ?= auto

.PHONY: all deps generate check-generated build test bench demo eval lint clean

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

clean:
	rm -rf $(BIN)

# The paper's evaluation (§V) on this machine: docs/EVALUATION.md and
# docs/eval/ (CSV, PNG, SVG). About 15 minutes.
eval: build
	$(BIN)/tierwall-lab eval --out docs/eval
