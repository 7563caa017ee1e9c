#!/bin/sh
# Gateway overhead against a direct path, side by side, on one machine:
#   mock upstream (web/examples/mock_upstream.rs) on :9001, `strata gateway` on :8081 in front of it.
# Saturated: wrk, 1 thread, 32 connections. Fixed rate: oha at $RATE req/s, 32 connections, latency
# corrected for coordinated omission. Prints one line per run; repeat and take medians.
# Usage: benches/gateway/run.sh [ROUNDS] [SECONDS] [RATE]   (binaries built with
#   cargo build --release -p strata -p strata-web --bin strata --example mock_upstream)
set -eu
ROUNDS=${1:-3}; SECS=${2:-15}; RATE=${3:-3000}
BODY='{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Say hello."}]}'
HERE=$(dirname "$0")
for round in $(seq "$ROUNDS"); do
  for target in direct:9001 gateway:8081; do
    name=${target%%:*}; port=${target##*:}
    url=http://127.0.0.1:$port/v1/chat/completions
    wrk -t1 -c32 -d"${SECS}s" --latency -s "$HERE/chat.lua" "$url" |
      awk -v r="$round" -v n="$name" '/Requests\/sec/ {rps=$2} / 50%/ {p50=$2} / 99%/ {p99=$2}
        END {printf "round %s %-7s saturated  req/s %s p50 %s p99 %s\n", r, n, rps, p50, p99}'
    oha --no-tui -z "${SECS}s" -c 32 -q "$RATE" --latency-correction -m POST \
      -H 'content-type: application/json' -d "$BODY" --output-format json "$url" |
      python3 -c "import json,sys; d=json.load(sys.stdin); p=d['latencyPercentiles']; s=d['summary']; \
print('round $round %-7s fixed $RATE/s req/s %.0f p50 %.3fms p99 %.3fms ok %.4f' % ('$name', s['requestsPerSec'], p['p50']*1e3, p['p99']*1e3, s['successRate']))"
  done
done
