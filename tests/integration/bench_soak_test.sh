#!/usr/bin/env bash
# `specstack bench soak` end to end, short: a real `specstack serve` on the
# TinyStories model (free port, loopback), 300 mixed requests (streams, n > 1,
# logprobs, stop strings, cancelled streams, malformed bodies) after an idle +
# slowloris connection flood of many more connections than the server's 8
# HTTP worker threads, which only its idle stage survives (thread-per-
# connection, the probe waits out the flood and fails). The soak exits
# non-zero on any 5xx, any wrong response, a probe slowed by the flood, or a KV block still held at the
# end; this script also checks that its report and the server's memory gauges
# are there, and the listen backlog. Usage: bench_soak_test.sh SPECSTACK_BINARY REPO_ROOT
set -euo pipefail
bin=$1
root=$2
work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$work/server.log" >&2; exit 1; }

: > "$work/server.log"
"$bin" serve --model "$root/models/tinystories-656k" --port 0 --no-access-log \
  --kv-blocks 512 --http-threads 8 2>>"$work/server.log" &
server=$!
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/server.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "server did not start"
grep -q "ready in .* s: weights .* s, KV reserve .* s" "$work/server.log" ||
  fail "the listening line lacks the start-up breakdown"

# The listen backlog (ss prints it as a listening socket's Send-Q): Debian's
# httplib listens with 5, and a burst of connects past it waits a second per
# dropped SYN; serve raises it to 1024 (the kernel caps it at somaxconn).
backlog=$(ss -Hltn "sport = :$port" | awk '{print $3}')
somaxconn=$(cat /proc/sys/net/core/somaxconn)
want=$((somaxconn < 1024 ? somaxconn : 1024))
[ "$backlog" = "$want" ] || fail "listen backlog is '$backlog', expected $want"

metrics=$(curl -s "http://127.0.0.1:$port/metrics")
for series in process_resident_memory_bytes specstack_kv_cache_bytes specstack_kv_cache_resident_bytes; do
  grep -q "^$series [0-9]" <<<"$metrics" || fail "/metrics lacks $series"
done

"$bin" bench soak --url "http://127.0.0.1:$port" --num-requests 300 --workers 8 --seed 7 \
  --report-every 100 --max-seconds 120 --flood-idle 200 --flood-slowloris 50 --flood-seconds 2 \
  >"$work/report.txt" 2>"$work/soak.log" || {
  cat "$work/soak.log" "$work/report.txt" >&2
  fail "bench soak failed"
}
cat "$work/report.txt"
grep -q "^ok: no 5xx" "$work/report.txt" || fail "no ok line"
grep -q "cancelled mid-stream [1-9]" "$work/report.txt" || fail "no stream was cancelled"
grep -q "malformed [1-9]" "$work/report.txt" || fail "no malformed request was sent"
grep -q "flood: 200 idle + 50 slowloris .*: ok" "$work/soak.log" || fail "flood check missing"
echo "ok: bench soak"
