# agentd build, generation and test entry points. `make test` is what CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export GOTOOLCHAIN := local
export CGO_ENABLED := 1

# Pinned code-generation tools, installed into bin/ and node_modules/.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# The same version as the vtprotobuf runtime go.mod requires.
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.1-0.20240319094008-0393e58bdf10
GRPCURL_VERSION            := v1.9.4
STATICCHECK_VERSION        := v0.8.2

BIN  := $(CURDIR)/bin
BUF  := $(CURDIR)/node_modules/.bin/buf
GO_TOOLS := $(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION) \
            $(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION) \
            $(BIN)/.protoc-gen-go-vtproto-$(PROTOC_GEN_GO_VTPROTO_VERSION) \
            $(BIN)/.grpcurl-$(GRPCURL_VERSION) \
            $(BIN)/.staticcheck-$(STATICCHECK_VERSION)

# Client packages: Node packages from clients/ts/package-lock.json; Python
# runs on Debian's interpreter and packages (no PyPI here).
TS_DEPS    := clients/ts/node_modules/.package-lock.json
PYTHON     := /usr/bin/python3
PY_DEBS    := python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc
# tmux drives agentctl chat in a real terminal in its tests; the sqlite3
# shell reads agentd's database beside it in the reader's test; the
# README's grpcurl blocks, which the smoke test runs, keep ids with jq;
# the web console's test drives Debian's chromium (with a CJK font, so its
# screenshots show the seed's Chinese prompts).
TEST_DEBS  := tmux sqlite3 jq chromium fonts-wqy-microhei
DEBS       := $(PY_DEBS) $(TEST_DEBS)

AGENTD_LISTEN      ?= 127.0.0.1:7777
AGENTD_HTTP_LISTEN ?= 127.0.0.1:7778
AGENTD_DB          ?= ./agentd.db

# The version both binaries report (--version, logs, MCP handshakes): the
# commit, or the tag, as git describes it; "dev" outside a git checkout and
# for a plain `go build`.
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GO_BUILD := go build -ldflags "-X main.version=$(VERSION)"

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: build ## Run agentd: gRPC on 127.0.0.1:7777, the web console and browser protocols on 127.0.0.1:7778, ./agentd.db.
	@echo "agentd $(VERSION) serving gRPC on $(AGENTD_LISTEN), the console on http://$(AGENTD_HTTP_LISTEN)/ui/, with $(AGENTD_DB); Ctrl-C stops it"
	$(BIN)/agentd --listen $(AGENTD_LISTEN) --http-listen $(AGENTD_HTTP_LISTEN) --db $(AGENTD_DB)

.PHONY: build build-agentd build-agentctl
build: build-agentd build-agentctl ## Build agentd and agentctl into bin/.

# go build's cache makes a rebuild quick; the first one compiles every
# dependency (minutes), so say what is being built.
build-agentd:
	@echo "building bin/agentd $(VERSION) (the first build compiles all dependencies and takes a few minutes)"
	@$(GO_BUILD) -o $(BIN)/agentd ./cmd/agentd

build-agentctl:
	@echo "building bin/agentctl $(VERSION)"
	@$(GO_BUILD) -o $(BIN)/agentctl ./cmd/agentctl

.PHONY: chat
chat: build-agentctl ## Talk to `make run`'s agentd in the terminal (agentctl chat; the faux model echoes).
	$(BIN)/agentctl chat --addr $(AGENTD_LISTEN)

.PHONY: tools
tools: $(GO_TOOLS) $(BUF) $(TS_DEPS) deb-deps ## Install the pinned generation and test tools.

$(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION):
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@

$(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION):
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@touch $@

$(BIN)/.protoc-gen-go-vtproto-$(PROTOC_GEN_GO_VTPROTO_VERSION):
	GOBIN=$(BIN) go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)
	@touch $@

$(BIN)/.grpcurl-$(GRPCURL_VERSION):
	GOBIN=$(BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	@touch $@

$(BIN)/.staticcheck-$(STATICCHECK_VERSION):
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

$(BUF): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# npm ci runs clients/ts's prepare script, whose build compiles gen/ts with
# the root's packages: those come first.
$(TS_DEPS): clients/ts/package.json clients/ts/package-lock.json | $(BUF)
	cd clients/ts && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: deb-deps python-deps
python-deps: deb-deps
deb-deps: ## Install the Debian packages tests need when missing: protoc, grpc_python_plugin, the Python gRPC runtime, tmux, sqlite3, jq.
	@if ! dpkg -s $(DEBS) >/dev/null 2>&1; then \
		echo "installing $(DEBS)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEBS); \
	fi

.PHONY: generate
generate: tools ## Regenerate gen/ (and the descriptors reflection serves) from proto/.
	$(BUF) generate
	$(BUF) generate --template buf.gen.internal.yaml
	$(BUF) build --exclude-path proto/agentd/internal -o service/apidoc/agentd.binpb

.PHONY: console
console: $(TS_DEPS) ## Rebuild the web console's bundle (service/console/static/console.js) from clients/ts/console.
	cd clients/ts && npm run -s console

.PHONY: check-generated
check-generated: generate console ## Fail when gen/ or the console's bundle differs from what proto/ and clients/ts generate.
	@changes="$$(git status --porcelain -- gen internal/replicapb service/apidoc service/console/static)"; \
	if [ -n "$$changes" ]; then \
		echo "generated code is stale or untracked; run 'make generate console' and commit gen/, internal/replicapb/ and service/console/static/:"; \
		echo "$$changes"; exit 1; \
	fi

.PHONY: lint
lint: tools ## go vet, staticcheck, gofmt, buf lint and buf format.
	go vet ./...
	$(BIN)/staticcheck ./...
	@unformatted="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' | grep -v '^gen/'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(BUF) lint
	$(BUF) format --diff --exit-code

.PHONY: go-test
go-test: build ## go test -race ./... (the Go example's test runs bin/agentd)
	AGENTD_BIN=$(BIN)/agentd go test -race -count=1 ./...

.PHONY: smoke
smoke: tools ## Start agentd on a free port and probe it with grpcurl.
	./.ci/smoke

.PHONY: ts-test
ts-test: tools build ## Type-check the TypeScript client and run its tests against a real agentd.
	cd clients/ts && npx tsc -p . && AGENTD_BIN=$(BIN)/agentd node --test build/clients/ts/test/*.test.js

.PHONY: py-test
py-test: tools build ## Run the Python client's tests against a real agentd.
	cd clients/python && PYTHONDONTWRITEBYTECODE=1 AGENTD_BIN=$(BIN)/agentd $(PYTHON) tests/run.py

.PHONY: ts-example
ts-example: $(TS_DEPS) ## Run the TypeScript example against `make run`'s agentd.
	cd clients/ts && npx tsc -p . && node build/clients/ts/examples/two_prompts.js --address $(AGENTD_LISTEN)

.PHONY: py-example
py-example: tools ## Run the Python example against `make run`'s agentd.
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) clients/python/examples/two_prompts.py --address $(AGENTD_LISTEN)

.PHONY: go-example
go-example: ## Run the Go example against `make run`'s agentd.
	go run ./clients/go/example --address $(AGENTD_LISTEN)

.PHONY: test
test: tools check-generated lint go-test smoke ts-test py-test ## Everything CI checks.

# `make bench` runs the benchmarks that carry the speed targets and prints
# each figure beside its target (internal/benchtable); AGENTD_BENCH_*
# variables scale them and AGENTD_BENCH_PROCS sets their GOMAXPROCS (see
# README, Benchmarks). BENCH_FLAGS adds go test flags (-count=5, ...).
# The raw output stays in $(BENCH_OUT), so the table can be printed again:
# go run ./internal/benchtable < bench.out.
BENCH_OUT   ?= bench.out
BENCH_FLAGS ?=
# BenchmarkRestore compares a restart with pi's SessionManager on the same
# transcript: pi is installed here, outside the repository, on first use
# (never a dependency of agentd).
BENCH_PI_DIR     ?= $(or $(TMPDIR),/tmp)/agentd-bench-pi
BENCH_PI_VERSION := 0.73.1

.PHONY: bench bench-all
bench: $(BENCH_PI_DIR)/node_modules/@mariozechner/pi-coding-agent ## Run the speed benchmarks and print each figure against its target (a few minutes).
	@set -o pipefail; { \
	  go test -run '^$$' -bench 'BenchmarkPromptStream$$' $(BENCH_FLAGS) ./service && \
	  go test -run '^$$' -bench 'BenchmarkConcurrentSessions/engine=sqlite/^(paced|unpaced)' -benchtime 1x $(BENCH_FLAGS) ./service && \
	  go test -run '^$$' -bench 'BenchmarkSessionLength|BenchmarkCompactedConversation' -benchtime 1x $(BENCH_FLAGS) ./service && \
	  go test -run '^$$' -bench 'BenchmarkContextPipeline|BenchmarkContextPathCompacted' $(BENCH_FLAGS) ./agent ./persistence/sqlite && \
	  go test -run '^$$' -bench 'BenchmarkAppend/sync=normal/text=realistic$$' -benchtime 1x $(BENCH_FLAGS) ./persistence/sqlite && \
	  AGENTD_BENCH_PI_DIR=$(BENCH_PI_DIR) go test -run '^$$' -bench 'BenchmarkAppendVsPi$$' -benchtime 3x $(BENCH_FLAGS) ./cmd/agentd && \
	  go test -run '^$$' -bench 'BenchmarkReplicas$$' -benchtime 1x $(BENCH_FLAGS) ./cmd/agentd && \
	  go test -run '^$$' -bench 'BenchmarkColdStart$$' -benchtime 10x $(BENCH_FLAGS) ./cmd/agentd && \
	  AGENTD_BENCH_PI_DIR=$(BENCH_PI_DIR) go test -run '^$$' -bench 'BenchmarkRestore$$' -benchtime 5x $(BENCH_FLAGS) ./cmd/agentd; \
	} 2>&1 | tee $(BENCH_OUT)
	@echo
	@go run ./internal/benchtable < $(BENCH_OUT)

$(BENCH_PI_DIR)/node_modules/@mariozechner/pi-coding-agent:
	mkdir -p $(BENCH_PI_DIR)
	npm install --prefix $(BENCH_PI_DIR) --no-audit --no-fund --loglevel=error @mariozechner/pi-coding-agent@$(BENCH_PI_VERSION)

bench-all: ## Run every benchmark of every package and print their figures (long).
	go test -run '^$$' -bench . -benchmem ./...

.PHONY: clean
clean: ## Remove built binaries and tools.
	rm -rf $(BIN) node_modules clients/ts/node_modules clients/ts/build
