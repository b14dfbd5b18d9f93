#!/bin/sh
# capture.sh regenerates catalog.json: the tools/list catalog viewmux
# exposes for the reference servers installed under integration/node_modules
# (server-everything as every, server-memory as memory, server-filesystem as
# fs) and the demo server (demo), as `viewmux tools --json` prints it,
# compacted. Run it from the repository root: sh internal/toolsearch/testdata/capture.sh
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/viewmux" ./cmd/viewmux
nm=$(cd integration/node_modules/@modelcontextprotocol && pwd -P)
mkdir "$tmp/root"
cat >"$tmp/capture.toml" <<TOML
[upstreams.every]
command = "node"
args = ["$nm/server-everything/dist/index.js", "stdio"]
[upstreams.memory]
command = "node"
args = ["$nm/server-memory/dist/index.js"]
env = { MEMORY_FILE_PATH = "$tmp/memory.jsonl" }
[upstreams.fs]
command = "node"
args = ["$nm/server-filesystem/dist/index.js", "$tmp/root"]
[upstreams.demo]
command = "$tmp/viewmux"
args = ["demo-server", "--name", "demo"]
TOML
"$tmp/viewmux" tools --config "$tmp/capture.toml" --json |
	python3 -c 'import json,sys; json.dump(json.load(sys.stdin), sys.stdout, separators=(",", ":"))' \
	>internal/toolsearch/testdata/catalog.json
