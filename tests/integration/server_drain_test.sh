#!/usr/bin/env bash
# Graceful drain of a real `specstack serve` (TinyStories): 32 streams are
# running when SIGTERM comes; from then on /health and new requests get 503,
# the 32 streams still end with [DONE] (finish_reason "length"), and the
# process exits 0 with every KV block free. A second run with a short
# --shutdown-timeout cuts long streams: finish_reason "shutdown", an error
# event, [DONE]; exit 0, pool free. And one with --request-timeout cuts a
# stream with "timeout" (curl and the openai npm client); a second signal
# cancels a long drain at once. Usage: server_drain_test.sh SPECSTACK_BINARY REPO_ROOT
set -euo pipefail
bin=$1
root=$2
work=$(mktemp -d)
SERVE_KILL_SIGNAL=KILL
source "$root/tests/lib/serve_harness.sh"

# start_server ARGS...: a server on TinyStories, log $work/server.log; sets $port and $server.
start_server() { start_server_on "$root/models/tinystories-656k" server "$@"; }

# launch_stream I MAX_TOKENS: one streaming completion in the background into
# $work/stream.I, its curl's pid appended to stream_pids.
launch_stream() {
  curl -sN --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $2, \"ignore_eos\": true, \"stream\": true}" \
    > "$work/stream.$1" &
  stream_pids+=($!)
}

# queue_streams FROM TO: streams FROM..TO of 480 tokens, waiting in the
# engine's queue (the server runs one sequence at a time); waits until the
# engine counts them all as waiting.
queue_streams() {
  for i in $(seq "$1" "$2"); do launch_stream "$i" 480; done
  local want=$(($2 - $1 + 1))
  for _ in $(seq 1 200); do
    [ "$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "specstack_num_requests_waiting" {print $2}')" = "$want" ] && return 0
    sleep 0.02
  done
  fail "the $want queued streams never all waited in the engine"
}

# start_streams N MAX_TOKENS: N streaming completions in the background, each
# into $work/stream.I; waits until every one has its first chunk.
start_streams() {
  local n=$1 max_tokens=$2
  stream_pids=()
  for i in $(seq 1 "$n"); do launch_stream "$i" "$max_tokens"; done
  for _ in $(seq 1 300); do
    local started=0
    for i in $(seq 1 "$n"); do grep -q '^data: {' "$work/stream.$i" 2>/dev/null && started=$((started + 1)); done
    [ "$started" = "$n" ] && return 0
    sleep 0.02
  done
  fail "only $started of $n streams started"
}

# expect_pool_free: the server's last line says every KV block is free.
expect_pool_free() {
  local line
  line=$(grep 'specstack: stopped:' "$work/server.log") || fail "$1: no 'stopped' line"
  echo "$line" | grep -qE 'KV cache ([0-9]+) of \1 blocks free$' || fail "$1: $line"
  pass "$1: $line"
}

# ------------------------------------------- drain: 32 streams run to the end
start_server --max-num-seqs 32 --shutdown-timeout 30
start_streams 32 240
t0=$(date +%s%N)
kill -TERM "$server"
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 503 ] && break
  sleep 0.02
done
status=$(curl -s -o "$work/body" -D "$work/headers" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "Once", "max_tokens": 4}')
[ "$status" = 503 ] || fail "a new request while draining: status $status: $(cat "$work/body")"
grep -q '"type":"server_shutting_down"' "$work/body" || fail "503 body: $(cat "$work/body")"
grep -qi '^Retry-After: 5' "$work/headers" || fail "503 without Retry-After: $(cat "$work/headers")"
pass "while draining: /health and new requests get 503 (server_shutting_down, Retry-After)"
running=$(for p in "${stream_pids[@]}"; do kill -0 "$p" 2>/dev/null && echo x; done | wc -l)
[ "$running" -gt 0 ] || fail "every stream had ended before the 503 checks: the test proves nothing"
pass "$running of 32 streams still running after the 503 checks"
rc=0
wait "$server" || rc=$?
t1=$(date +%s%N)
[ "$rc" = 0 ] || fail "the server exited $rc after the drain"
for i in $(seq 1 32); do wait "${stream_pids[$((i - 1))]}" || fail "stream $i: curl failed"; done
for i in $(seq 1 32); do
  tail -n 2 "$work/stream.$i" | grep -q '^data: \[DONE\]' || fail "stream $i does not end with [DONE]"
  [ "$(grep -c '"finish_reason":"length"' "$work/stream.$i")" = 1 ] || fail "stream $i did not finish with length"
  grep -q '"error"' "$work/stream.$i" && fail "stream $i has an error event"
done
pass "32 streams ended with finish_reason length and [DONE]; exit 0 after $(( (t1 - t0) / 1000000 )) ms"
expect_pool_free "drain"

# ------------------------ a short shutdown timeout cancels the long streams
# One sequence at a time, six streams of 480 tokens: ~1 s of work even on a
# quiet machine (one 480-token stream took ~0.2 s), far more than 0.05 s.
start_server --max-num-seqs 1 --shutdown-timeout 0.05
start_streams 1 480
queue_streams 2 6
t0=$(date +%s%N)
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
t1=$(date +%s%N)
[ "$rc" = 0 ] || fail "the server exited $rc after cancelling"
elapsed_ms=$(( (t1 - t0) / 1000000 ))
[ "$elapsed_ms" -lt 5000 ] || fail "the shutdown took $elapsed_ms ms with --shutdown-timeout 0.05"
wait "${stream_pids[@]}" || true
n_cut=0
for i in $(seq 1 6); do
  f="$work/stream.$i"
  tail -n 2 "$f" | grep -q '^data: \[DONE\]' || fail "stream $i does not end with [DONE]: $(tail -c 300 "$f")"
  if grep -q '"finish_reason":"shutdown"' "$f"; then
    grep -q '"type":"server_shutting_down"' "$f" || fail "stream $i: shutdown without an error event"
    n_cut=$((n_cut + 1))
  else
    grep -q '"finish_reason":"length"' "$f" || fail "stream $i ended with neither length nor shutdown"
  fi
done
[ "$n_cut" -ge 3 ] || fail "only $n_cut of 6 streams were cut by the shutdown timeout"
pass "shutdown timeout 0.3 s: $n_cut of 6 streams ended with finish_reason shutdown, an error event and [DONE], the rest with length; exit 0 after $elapsed_ms ms"
expect_pool_free "shutdown timeout"

# ----------------------- a second signal cancels at once (long drain timeout)
start_server --max-num-seqs 1 --shutdown-timeout 60
start_streams 1 480
queue_streams 2 4  # the drain would take far longer than the test
t0=$(date +%s%N)
kill -TERM "$server"
sleep 0.1
kill -INT "$server"
rc=0
wait "$server" || rc=$?
t1=$(date +%s%N)
[ "$rc" = 0 ] || fail "the server exited $rc after a second signal"
elapsed_ms=$(( (t1 - t0) / 1000000 ))
[ "$elapsed_ms" -lt 5000 ] || fail "the second signal did not cut the drain short ($elapsed_ms ms)"
wait "${stream_pids[@]}" || true
n_cut=0
for i in 1 2 3 4; do
  tail -n 2 "$work/stream.$i" | grep -q '^data: \[DONE\]' || fail "stream $i does not end with [DONE]"
  grep -q '"finish_reason":"shutdown"' "$work/stream.$i" && n_cut=$((n_cut + 1))
done
[ "$n_cut" -ge 3 ] || fail "only $n_cut of 4 streams were cut by the second signal"
grep -q 'second signal (SIGINT): cancelling' "$work/server.log" || fail "no second-signal log line"
pass "second signal: $n_cut of 4 streams cut with shutdown and [DONE]; exit 0 after $elapsed_ms ms"
expect_pool_free "second signal"

# ---------------------------------------------- --request-timeout on a stream
start_server --max-num-seqs 4 --request-timeout 0.1
curl -sN --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 480, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}' \
  > "$work/timed" || fail "timed stream: curl failed"
grep -q '"finish_reason":"timeout"' "$work/timed" || fail "no timeout finish: $(tail -c 300 "$work/timed")"
grep -q '"type":"timeout"' "$work/timed" || fail "no timeout error event"
grep -q '"timing":{"queue_ms":[0-9.]*,"ttft_ms":[0-9.]*,"total_ms":[0-9.]*}' "$work/timed" ||
  fail "no usage.timing: $(tail -c 400 "$work/timed")"
tail -n 2 "$work/timed" | grep -q '^data: \[DONE\]' || fail "timed stream: no [DONE]"
status=$(curl -s -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 480, "ignore_eos": true, "timeout": 0.05}')
[ "$status" = 504 ] || fail "non-streamed timeout: status $status: $(cat "$work/body")"
pass "--request-timeout: a stream ends with timeout, usage.timing and [DONE]; \"timeout\": 0.05 gives 504"
SPECSTACK_NPM_DIR="$root/.deps/npm" node "$root/tests/integration/openai_timeout_client.mjs" \
  "http://127.0.0.1:$port/v1" tinystories-656k || fail "openai client timeout checks"
for _ in $(seq 1 100); do
  [ "$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "specstack_kv_blocks_free" {print $2}')" = \
    "$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "specstack_kv_blocks_total" {print $2}')" ] && break
  sleep 0.05
done
kill -INT "$server"
rc=0
wait "$server" || rc=$?
[ "$rc" = 0 ] || fail "SIGINT on an idle server: exit $rc"
expect_pool_free "request timeouts"
