#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/<name>_fuzz.cpp) with clang and
# runs each for FUZZ_SECONDS on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<name>/), so the checked-in seeds stay small.
# Exits non-zero if any target fails to build or finds a crash; crash inputs
# are kept under <build-dir>/fuzz-artifacts/<target>/.
#
# Usage: FUZZ_SECONDS=60 scripts/fuzz.sh
#   FUZZ_SECONDS  seconds per target (default 30)
#   FUZZ_BUILD    build directory (default build-fuzz)
#   FUZZ_JOBS     build parallelism (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-30}
build_dir=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-2}

# SPECSTACK_FUZZ only instruments the fuzz executables themselves; the
# parsers live in the layer libraries, which need the coverage hooks
# (fuzzer-no-link) and sanitizers too or libFuzzer would fuzz blind.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DSPECSTACK_FUZZ=ON -DSPECSTACK_BUILD_BENCH=OFF -DSPECSTACK_BUILD_TESTS=ON \
  -DSPECSTACK_SANITIZE=address,undefined -DSPECSTACK_CUDA=OFF \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
  >/dev/null

targets=()
for src in tests/fuzz/*_fuzz.cpp; do
  [ -e "$src" ] || continue
  targets+=("$(basename "$src" .cpp)")
done
if ((${#targets[@]} == 0)); then
  echo "fuzz.sh: no tests/fuzz/*_fuzz.cpp targets" >&2
  exit 1
fi
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  name=${target%_fuzz}
  work="$scratch/$name"
  mkdir -p "$work"
  if [ -d "tests/fuzz/corpus/$name" ]; then
    cp -r "tests/fuzz/corpus/$name/." "$work/"
  else
    echo "fuzz.sh: warning: no seed corpus tests/fuzz/corpus/$name" >&2
  fi
  artifacts="$build_dir/fuzz-artifacts/$target"
  mkdir -p "$artifacts"
  echo "== $target: ${seconds}s on $(find "$work" -type f | wc -l) seeds"
  if ! "$build_dir/tests/$target" "$work" -max_total_time="$seconds" -max_len=8192 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" 2>"$build_dir/fuzz-$target.log"; then
    failed+=("$target")
    tail -n 40 "$build_dir/fuzz-$target.log" >&2
    echo "== $target FAILED (inputs in $artifacts, log in $build_dir/fuzz-$target.log)" >&2
  else
    grep -E "^stat::number_of_executed_units|^Done" "$build_dir/fuzz-$target.log" || true
    echo "== $target ok"
  fi
done

if ((${#failed[@]})); then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran ${seconds}s without a crash"
