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
# ldflags, `viewmux version` reads Go's build info instead. The same flags are
# used by .goreleaser.yaml and the Dockerfiles.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.linkVersion=$(VERSION) -X main.linkCommit=$(COMMIT)
BIN     ?= bin/viewmux
IMAGE   ?= ghcr.io/viewmux/viewmux
PODMAN  ?= podman

.PHONY: test unit peers build vet fmt fuzz man completions image image-node helm-test release-check

# The end-to-end packages spend much of their time waiting on child
# processes and the network, so go test runs more packages at once than
# there are cores (its default -p); TESTP overrides it.
TESTP ?= 3

test: peers vet
	$(GO) test -race -count=1 -p $(TESTP) -timeout 30m ./...

# unit runs everything but the end-to-end tests.
unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /integration)

peers: $(PEERS)

$(PEERS): integration/package.json integration/package-lock.json
	cd integration && $(NPM) ci --no-audit --no-fund
	@touch $@

# build writes a static binary (no cgo) with the version stamped in.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/viewmux

# man and completions are made from the CLI's own command table.
man: build
	$(BIN) man > bin/viewmux.1

completions: build
	$(BIN) completion bash > bin/viewmux.bash
	$(BIN) completion zsh > bin/_viewmux
	$(BIN) completion fish > bin/viewmux.fish

# image builds the container image k8s.yaml and the Helm chart name;
# image-node the variant with Node.js for npm-based stdio upstreams.
image:
	$(PODMAN) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(VERSION) -f Dockerfile .

image-node:
	$(PODMAN) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(VERSION)-node -f Dockerfile.node .

# helm-test renders the chart and checks its objects (configs/helm_test.go).
helm-test:
	$(GO) test -count=1 -run 'TestHelm' ./configs/

# release-check validates .goreleaser.yaml by building each of its targets
# with its flags (cmd/viewmux/release_test.go).
release-check:
	$(GO) test -count=1 -run 'TestRelease' ./cmd/viewmux/

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd deploy/helm/chartcheck && $(GO) vet ./...
	cd integration/otlpsink && $(GO) vet ./...
	cd integration/zitadelop && $(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# fuzz runs each fuzz test for a short while (FUZZTIME, default 20s).
FUZZTIME ?= 20s
fuzz:
	$(GO) test ./aggregator/ -run '^$$' -fuzz FuzzExpose -fuzztime $(FUZZTIME)
	$(GO) test ./internal/glob/ -run '^$$' -fuzz FuzzCompile -fuzztime $(FUZZTIME)
	$(GO) test ./configs/ -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonrpc/ -run '^$$' -fuzz FuzzCheckUnambiguous -fuzztime $(FUZZTIME)
