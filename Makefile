# The Makefile is the contract: every target runs on a fresh machine with only Go installed.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X github.com/thatch-dev/thatch/runtime.Version=$(VERSION)
BIN           := bin/thatch

FUZZTIME      ?= 15s

SOAK          ?= 10m

.PHONY: run build test fuzz check fmt vet staticcheck bench soak clean

## run: start thatch with the embedded broker and journal (no set-up needed)
run: build
	./$(BIN) serve

## build: build bin/thatch
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/thatch

## test: every test, with the race detector
test:
	$(GO) test -race -count=1 -timeout 20m ./...

## fuzz: each fuzz target for FUZZTIME (seed corpora also run in make test)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./runtime
	$(GO) test -run '^$$' -fuzz '^FuzzToolCall$$' -fuzztime $(FUZZTIME) ./runtime

## check: formatting, vet, staticcheck and the tests
check: fmt vet staticcheck test

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run $(STATICCHECK) ./...

## bench: the full benchmark (report in bench.json) and the hot-path Go benchmarks
bench: build
	./$(BIN) bench --out bench.json
	$(GO) test -run '^$$' -bench . -benchtime 2s ./runtime ./journal

## soak: a long run sampling memory, goroutines and the journal (not in CI)
soak: build
	./$(BIN) bench --soak $(SOAK)

clean:
	rm -rf bin
