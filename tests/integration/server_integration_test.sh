#!/usr/bin/env bash
# Starts `specstack serve` on 127.0.0.1 (free port) with the real TinyStories
# model and drives it with curl and with the official openai npm client:
# greedy output equals `specstack generate`, every bad input gets the right
# OpenAI-style error, disconnects cancel, a tiny KV pool forces preemption,
# a full queue answers 429 with Retry-After, speculative decoding with a draft
# gives the plain server's greedy text — and at the end the block pool is
# completely free again (from /metrics). Usage: server_integration_test.sh SPECSTACK_BINARY REPO_ROOT
set -euo pipefail
bin=$1
root=$2
work=$(mktemp -d)
source "$root/tests/lib/serve_harness.sh"

copy_with_chat_template "$root/models/tinystories-656k" "$work/model" "$tinystories_chat_template"

# start_server NAME ARGS...: a server on the TinyStories copy; sets $port.
start_server() { start_server_on "$work/model" "$@"; }

# request METHOD PATH [BODY] [extra curl args]: prints "STATUS\nBODY".
request() {
  local method=$1 path=$2 body=${3:-}
  shift 3 || shift $#
  if [ -n "$body" ]; then
    curl -s -o "$work/body" -w '%{http_code}' -X "$method" "http://127.0.0.1:$port$path" \
      -H 'Content-Type: application/json' --data-binary "$body" "$@" || true
  else
    curl -s -o "$work/body" -w '%{http_code}' -X "$method" "http://127.0.0.1:$port$path" "$@" || true
  fi
}
expect_status() {  # expect_status WANT GOT WHAT [substring of the body]
  [ "$2" = "$1" ] || fail "$3: status $2, want $1: $(cat "$work/body")"
  if [ -n "${4:-}" ]; then grep -q -- "$4" "$work/body" || fail "$3: body lacks '$4': $(cat "$work/body")"; fi
  pass "$3 -> $1"
}
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
wait_pool_free() {
  for _ in $(seq 1 200); do
    if [ "$(metric specstack_kv_blocks_free)" = "$(metric specstack_kv_blocks_total)" ] &&
       [ "$(metric specstack_num_requests_running)" = "0" ] && [ "$(metric specstack_num_requests_waiting)" = "0" ]; then
      pass "$1: block pool fully free ($(metric specstack_kv_blocks_total) blocks), nothing running or waiting"
      return 0
    fi
    sleep 0.1
  done
  fail "$1: pool not free: free=$(metric specstack_kv_blocks_free) total=$(metric specstack_kv_blocks_total) running=$(metric specstack_num_requests_running)"
}

expected=$("$bin" generate --model "$work/model" --prompt "Once upon a time" -n 32 2>/dev/null)

# ---------------------------------------------------------------- main server
start_server main --max-num-seqs 8 --max-queue 256
expect_status 200 "$(request GET /health)" "GET /health"
expect_status 200 "$(request GET /v1/models)" "GET /v1/models" '"model"'
expect_status 200 "$(request POST /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}')" "completion"
got=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).choices[0].text)' "$work/body")
[ "$got" = "$expected" ] || fail "curl completion text differs from generate: '$got' vs '$expected'"
pass "curl greedy completion equals specstack generate"
curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":8,"stream":true}' > "$work/sse"
tail -2 "$work/sse" | grep -q '^data: \[DONE\]' || fail "SSE stream does not end with data: [DONE]"
pass "SSE stream ends with data: [DONE]"

# Fault matrix: each bad input gets OpenAI-style error JSON with the right status.
expect_status 400 "$(request POST /v1/completions '{"prompt": "hi", "max_tokens": ')" "malformed JSON" '"error"'
expect_status 400 "$(request POST /v1/completions '{"prompt":"hi","temperature":"hot"}')" "wrong type" 'temperature'
expect_status 400 "$(request POST /v1/completions '{"prompt":"hi","top_p":5}')" "out of range" 'top_p'
expect_status 400 "$(request POST /v1/completions '{"prompt":"hi","max_tokens":100000}')" "over the context" 'maximum context length'
printf '{"prompt":"\xff\xfe bad","max_tokens":4}' > "$work/bad_utf8.json"
expect_status 400 "$(curl -s -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' --data-binary @"$work/bad_utf8.json")" "invalid UTF-8" '"error"'
expect_status 404 "$(request GET /v1/nothing)" "unknown route" '"error"'
expect_status 404 "$(request POST /v1/completions '{"model":"no-such-model","prompt":"hi"}')" "unknown model" 'no-such-model'
head -c 9000000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt":"/; s/$/"}/' > "$work/big.json"
expect_status 413 "$(curl -s -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' --data-binary @"$work/big.json")" "body over the size limit"

# Client disconnect mid-stream cancels the request.
curl -sN --max-time 1 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}' > /dev/null || true
wait_pool_free "after a client disconnect"

# The official openai npm client: streaming and not, completions and chat, 64 streams with cancellation.
SPECSTACK_NPM_DIR="$root/.deps/npm" node "$root/tests/integration/openai_client.mjs" \
  "http://127.0.0.1:$port/v1" model "$expected" || fail "openai client checks"
wait_pool_free "after the openai client run"
# The plain server's greedy chat reply, for the speculative server below (JSON-encoded).
expected_chat=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Tell me a story about a dog."}],"max_tokens":24,"temperature":0}' |
  node -e 'let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => console.log(JSON.stringify(JSON.parse(s).choices[0].message.content)))')

# ------------------------------------------------- speculative decoding
# The draft is the model's first layer alone (the loader skips the second
# layer's tensors): a weak draft, so verification rejects and rolls back often.
cp -r "$work/model" "$work/draft"
node -e '
const fs = require("fs"); const f = process.argv[1];
const c = JSON.parse(fs.readFileSync(f, "utf8")); c.num_hidden_layers = 1;
fs.writeFileSync(f, JSON.stringify(c, null, 2));' "$work/draft/config.json"
start_server spec --draft "$work/draft" --spec-decode --spec-tokens 3 --spec-fixed-k --max-num-seqs 8
SPECSTACK_NPM_DIR="$root/.deps/npm" node "$root/tests/integration/openai_specdecode_client.mjs" \
  "http://127.0.0.1:$port/v1" model "$expected" "$expected_chat" || fail "openai client checks with speculative decoding"
[ "$(metric specstack_spec_decode_draft_tokens_total)" -gt 0 ] || fail "no draft tokens on /metrics"
[ "$(metric specstack_spec_decode_verifications_total)" -gt 0 ] || fail "no verifications on /metrics"
pass "speculative decoding: $(metric specstack_spec_decode_accepted_tokens_total) of $(metric specstack_spec_decode_draft_tokens_total) draft tokens accepted"
wait_pool_free "after speculative decoding"
[ "$(metric specstack_draft_kv_blocks_free)" = "$(metric specstack_draft_kv_blocks_total)" ] ||
  fail "draft pool not free: $(metric specstack_draft_kv_blocks_free) of $(metric specstack_draft_kv_blocks_total)"
pass "speculative decoding: the draft's block pool is fully free too"

# ------------------------------------------------- structured outputs
# A random-weight golden model (llama-gqa, vocab 512) with a byte-level
# tokenizer learned on JSON (tests/data/grammar): only the grammar makes its
# output JSON; ajv (npm) validates every answer against its schema.
mkdir -p "$work/json-model"
cp "$root/tests/data/golden/models/llama-gqa/config.json" "$root/tests/data/golden/models/llama-gqa/model.safetensors" \
  "$root/tests/data/grammar/json-bytes-512/tokenizer.json" "$root/tests/data/grammar/json-bytes-512/tokenizer_config.json" "$work/json-model/"
start_server_on "$work/json-model" structured --served-model-name model
SPECSTACK_NPM_DIR="${SPECSTACK_NPM_DIR:-$root/.deps/npm}" node "$root/tests/integration/openai_structured_client.mjs" \
  "http://127.0.0.1:$port/v1" model || fail "structured outputs (openai client + ajv)"
wait_pool_free "after structured outputs"

# ------------------------------------------------- tool calling
# The same random-weight model with Qwen3's chat template (Hermes
# <tool_call>): forced calls must validate (ajv), streamed calls reassemble.
copy_with_chat_template "$work/json-model" "$work/tools-model" \
  "$(node -p 'require(process.argv[1]).chat_template' "$root/tests/data/golden/tokenizers/qwen3/tokenizer_config.json")"
start_server_on "$work/tools-model" tools --served-model-name model
SPECSTACK_NPM_DIR="${SPECSTACK_NPM_DIR:-$root/.deps/npm}" node "$root/tests/integration/openai_tools_client.mjs" \
  "http://127.0.0.1:$port/v1" model || fail "tool calling (openai client + ajv)"
wait_pool_free "after tool calling"

# ------------------------------------------------- tiny KV pool: preemption
start_server tiny --kv-blocks 12 --max-num-seqs 8
for i in $(seq 1 8); do
  curl -s -o "$work/tiny$i" -w '%{http_code}\n' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Tom and his friend number $i went to the big park\",\"max_tokens\":120,\"ignore_eos\":true,\"temperature\":0}" >> "$work/tiny_codes" &
done
wait_jobs() { for job in $(jobs -p); do case " ${pids[*]} " in *" $job "*) ;; *) wait "$job" || true;; esac; done; }
wait_jobs
[ "$(grep -c '^200$' "$work/tiny_codes")" = 8 ] || fail "tiny pool: not every request succeeded: $(tr '\n' ' ' < "$work/tiny_codes")"
[ "$(metric specstack_preemptions_total)" -gt 0 ] || fail "tiny pool: no preemption happened"
pass "tiny KV pool: 8/8 requests completed with $(metric specstack_preemptions_total) preemptions"
wait_pool_free "after preemption"

# ------------------------------------------------- full queue: 429 + Retry-After
start_server queue --max-num-seqs 1 --max-queue 1
for i in $(seq 1 6); do
  curl -s -D "$work/q$i.h" -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true}' >> "$work/q_codes" &
done
wait_jobs
grep -q '^429$' "$work/q_codes" || fail "queue overflow: no 429 among $(tr '\n' ' ' < "$work/q_codes")"
grep -il '^retry-after:' "$work"/q*.h > /dev/null || fail "429 without Retry-After"
grep -q '^200$' "$work/q_codes" || fail "queue overflow: nothing was served"
pass "full queue: 429 with Retry-After, others served ($(tr '\n' ' ' < "$work/q_codes"))"
wait_pool_free "after queue overflow"

# ------------------------------------------------------------ API key
start_server keyed --api-key sekrit
expect_status 401 "$(request GET /v1/models)" "missing API key"
expect_status 401 "$(request GET /v1/models '' -H 'Authorization: Bearer wrong')" "wrong API key"
expect_status 200 "$(request GET /v1/models '' -H 'Authorization: Bearer sekrit')" "right API key"
echo "server integration: all checks passed"
