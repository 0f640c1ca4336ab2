#!/usr/bin/env bash
# Builds the concurrent parts (engine loop, request streams, HTTP server) with
# ThreadSanitizer and runs their tests. Any race report fails the run.
# Usage: scripts/tsan.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TSAN_BUILD:-build-tsan}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSPECSTACK_SANITIZE=thread -DSPECSTACK_BUILD_BENCH=OFF -DSPECSTACK_CUDA=OFF >/dev/null
targets=(test_engine)
[ -d tests/server ] && targets+=(test_server)
cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
"$build_dir/tests/test_engine" --gtest_filter='Engine.*:Scheduler*:SpecPrefill*'
if [ -x "$build_dir/tests/test_server" ]; then "$build_dir/tests/test_server"; fi
echo "tsan.sh: no data races reported"
