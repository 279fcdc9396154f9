# The Makefile is the contract: every target runs on a fresh machine with only Go installed.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X github.com/thatch-dev/thatch/runtime.Version=$(VERSION)
BIN           := bin/thatch
BENCH_BIN     := bin/thatch-bench

# Each fuzz target's budget is a count of inputs (about 15 s each on a 2-core machine), not a
# duration: with a duration, Go 1.26's fuzz coordinator can race its own deadline under load
# and fail with a bare "context deadline exceeded" and no failing input (go.dev/issue/75804,
# fixed in Go 1.27). FUZZTIME (e.g. 30s or 1000000x) sets one budget for all of them.
FUZZTIME      ?=

SOAK          ?= 10m

# make e2e: the real opencode, installed from npm into a cache folder outside the repo.
OPENCODE_VERSION := 1.18.33
E2E_CACHE     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/thatch-e2e/$(OPENCODE_VERSION)
CLAUDE_VERSION := 2.1.328
CLAUDE_CACHE  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/thatch-e2e/claude-code-$(CLAUDE_VERSION)

# make ui-test: where the test saves its screenshots (none when empty; make ui-shots: docs/ui).
UI_SHOTS      ?=

.PHONY: run build test e2e ui-test ui-shots fuzz check fmt vet staticcheck bench soak clean

## run: start thatch with the embedded broker and journal (no set-up needed)
run: build
	./$(BIN) serve

## build: build bin/thatch, and bin/thatch-bench (the benchmark, a command of its own)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/thatch ./cmd/thatch-bench

## test: every test, with the race detector
test:
	$(GO) test -race -count=1 -timeout 20m ./...

## e2e: thatch against the real opencode $(OPENCODE_VERSION) and Claude Code $(CLAUDE_VERSION) (installs them, and ripgrep, on first use)
e2e:
	@bin=$$(./testdata/e2e/setup.sh "$(E2E_CACHE)" $(OPENCODE_VERSION)) && \
	claude=$$(./testdata/e2e/setup-claude.sh "$(CLAUDE_CACHE)" $(CLAUDE_VERSION)) && \
	THATCH_E2E_OPENCODE="$$bin" THATCH_E2E_MODULES="$(E2E_CACHE)/node_modules" THATCH_E2E_CLAUDE="$$claude" \
		$(GO) test -tags e2e -run '^(TestOpencodeEndToEnd|TestClaudeCodeEndToEnd|TestCrossHostEndToEnd|TestShimWithoutThatch|TestShimContext)$$' -count=1 -v -timeout 20m ./cmd/thatch ./commands

## ui-test: thatch's web page in headless Chromium (installs Debian's chromium with apt on first use)
ui-test:
	@bin=$$(./testdata/ui/setup.sh) && \
	THATCH_UI_CHROMIUM="$$bin" THATCH_UI_SHOTS="$(UI_SHOTS)" \
		$(GO) test -tags browser -run '^TestBrowserUI$$' -count=1 -v -timeout 10m ./cmd/thatch

## ui-shots: ui-test, saving a screenshot of each page into docs/ui (docs/operator.md shows them)
ui-shots:
	$(MAKE) ui-test UI_SHOTS="$(CURDIR)/docs/ui"

## fuzz: each fuzz target for its budget, or FUZZTIME (seed corpora also run in make test)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(or $(FUZZTIME),120000x) ./runtime
	$(GO) test -run '^$$' -fuzz '^FuzzToolCall$$' -fuzztime $(or $(FUZZTIME),100000x) ./runtime
	$(GO) test -run '^$$' -fuzz '^FuzzText$$' -fuzztime $(or $(FUZZTIME),60000x) ./runtime/redact
	$(GO) test -run '^$$' -fuzz '^FuzzJSON$$' -fuzztime $(or $(FUZZTIME),400000x) ./runtime/redact
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeVersion$$' -fuzztime $(or $(FUZZTIME),100000x) ./journal/memory

## check: formatting, vet, staticcheck and the tests
check: fmt vet staticcheck test

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags e2e,browser ./...

staticcheck:
	$(GO) run $(STATICCHECK) -tags e2e,browser ./...

## bench: the full benchmark (report in bench.json) and the hot-path Go benchmarks
bench: build
	./$(BENCH_BIN) --out bench.json
	$(GO) test -run '^$$' -bench . -benchtime 2s ./runtime ./journal ./journal/memory ./runtime/redact

## soak: a long run of bin/thatch serve sampling memory, goroutines and the journal (not in CI)
soak: build
	./$(BENCH_BIN) --soak $(SOAK)

clean:
	rm -rf bin
