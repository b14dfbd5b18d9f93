# `make test` is the one command that runs every test: it installs the pinned
# Node peers (the official TypeScript SDK client and the reference servers)
# and runs the Go tests, with the race detector, including the end-to-end
# tests under integration/.

GO      ?= go
NPM     ?= npm
PEERS   := integration/node_modules/.package-lock.json

.PHONY: test unit peers build vet fmt fuzz

test: peers vet
	$(GO) test -race -count=1 -timeout 30m ./...

# unit runs everything but the end-to-end tests.
unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /integration)

peers: $(PEERS)

$(PEERS): integration/package.json integration/package-lock.json
	cd integration && $(NPM) ci --no-audit --no-fund
	@touch $@

build:
	$(GO) build -o bin/mcpmux ./cmd/mcpmux

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# fuzz runs each fuzz test for a short while (FUZZTIME, default 20s).
FUZZTIME ?= 20s
fuzz:
	$(GO) test ./aggregator/ -run '^$$' -fuzz FuzzExpose -fuzztime $(FUZZTIME)
	$(GO) test ./internal/glob/ -run '^$$' -fuzz FuzzCompile -fuzztime $(FUZZTIME)
	$(GO) test ./configs/ -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonrpc/ -run '^$$' -fuzz FuzzCheckUnambiguous -fuzztime $(FUZZTIME)
