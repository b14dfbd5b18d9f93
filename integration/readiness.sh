#!/usr/bin/env bash
# Measures viewmux's time from exec to GET /readyz == 200 with the embedded
# quickstart (two demo upstreams over stdio), then its idle RSS after 5 s,
# and the peak RSS reported by /usr/bin/time -v. Usage:
#   integration/readiness.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
bin=$(mktemp -d)/viewmux
go build -o "$bin" ./cmd/viewmux
for i in $(seq "$runs"); do
  d=$(mktemp -d)
  port=$((20000 + RANDOM % 20000))
  t0=$(date +%s%N)
  (cd "$d" && HOME=$d XDG_CONFIG_HOME=$d exec /usr/bin/time -v "$bin" serve --listen 127.0.0.1:$port 2>"$d/log") &
  until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do sleep 0.002; done
  t1=$(date +%s%N)
  pid=$(pgrep -f -- "--listen 127.0.0.1:$port" | while read -r p; do [ "$(cat /proc/$p/comm)" = viewmux ] && echo "$p"; done | head -1)
  sleep 5
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait
  peak=$(awk -F': ' '/Maximum resident/{print $2}' "$d/log")
  echo "run $i: ready $(( (t1 - t0) / 1000000 )) ms; idle RSS ${rss} kB; peak RSS ${peak} kB; $(grep -o 'msg=ready.*' "$d/log")"
  rm -rf "$d"
done
