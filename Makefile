# `make test` is the one command that runs every test: it installs the pinned
# Node peers (the official TypeScript SDK client and the reference servers)
# and runs the Go tests, with the race detector, including the end-to-end
# tests under integration/.

GO      ?= go
NPM     ?= npm
PEERS   := integration/node_modules/.package-lock.json

# The version stamped into builds: the nearest tag, commits since it and the
# commit (v1.2.0-3-gabc1234), -dirty for uncommitted changes, or the bare
# commit before the first tag. `go install` needs none of this: without
# ldflags, `mcpmux version` reads Go's build info instead. The same flags are
# used by .goreleaser.yaml and the Dockerfiles.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.linkVersion=$(VERSION) -X main.linkCommit=$(COMMIT)
BIN     ?= bin/mcpmux

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

# build writes a static binary (no cgo) with the version stamped in.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/mcpmux

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
