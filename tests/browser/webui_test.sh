#!/usr/bin/env bash
# The web UI end to end: real `specstack serve` processes (TinyStories, alone
# and as its own draft with SpecPrefill forced on short prompts), checked
# with curl (content types, CSP, --no-web-ui) and then in Debian's chromium
# driven by puppeteer-core (tests/browser/webui.mjs). Screenshots go to
# SCREENSHOT_DIR. Skips (exit 77) only when no chromium is installed.
# Usage: webui_test.sh SPECSTACK_BINARY REPO_ROOT SCREENSHOT_DIR
set -euo pipefail
bin=$1
root=$2
shots=$3
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium" ]; then
  echo "SKIP: no chromium found (apt-get install chromium; scripts/setup.sh does): the web UI browser test did not run"
  exit 77
fi
[ -f "$root/.deps/npm/node_modules/puppeteer-core/package.json" ] ||
  { echo "FAIL: puppeteer-core is not installed under .deps/npm (run scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
source "$root/tests/lib/serve_harness.sh"

copy_with_chat_template "$root/models/tinystories-656k" "$work/model" "$tinystories_chat_template"

# start_server NAME ARGS...: a server on the TinyStories copy; sets $port.
start_server() { start_server_on "$work/model" "$@"; }
header() { curl -s -D - -o /dev/null "http://127.0.0.1:$port$1" | tr -d '\r' | sed -n "s/^$2: //Ip"; }
status() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$1"; }

# ------------------------------------------------------------ --no-web-ui
start_server off --no-web-ui
[ "$(status /)" = 404 ] || fail "--no-web-ui: / is $(status /), want 404"
[ "$(status /assets/main.js)" = 404 ] || fail "--no-web-ui: /assets/main.js is not 404"
pass "--no-web-ui: / and /assets/ answer 404"

# ------------------------------------------------- a draft: SpecPrefill forced
# The model is its own draft; every prompt of >= 16 tokens is scored in
# chunks of 8 and 30% kept, and decoding speculates with the same draft.
start_server draft --draft "$work/model" --specprefill --specprefill-threshold 16 \
  --specprefill-chunk 8 --specprefill-keep-pct 0.3 --spec-decode --spec-tokens 3
draft_port=$port
[ "$(status /)" = 200 ] || fail "/ is $(status /)"
[ "$(header / content-type)" = "text/html; charset=utf-8" ] || fail "/ content type: $(header / content-type)"
[ "$(header /assets/main.js content-type)" = "text/javascript; charset=utf-8" ] || fail "main.js content type"
[ "$(header /assets/app.css content-type)" = "text/css; charset=utf-8" ] || fail "app.css content type"
header / content-security-policy | grep -q "script-src 'self'" || fail "no CSP on /"
pass "web UI: page and assets served with their content types and a CSP"

# ----------------------------------------------------------- an API key
start_server key --api-key webui-test-key
key_port=$port

SPECSTACK_NPM_DIR="$root/.deps/npm" CHROMIUM="$chromium" timeout 150 node "$root/tests/browser/webui.mjs" \
  "http://127.0.0.1:$draft_port" "http://127.0.0.1:$key_port" webui-test-key "$shots" ||
  fail "browser checks"
