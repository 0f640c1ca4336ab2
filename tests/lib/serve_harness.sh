#!/usr/bin/env bash
# Shared by the shell tests that drive real `specstack serve` processes
# (tests/integration, tests/browser). Source it after setting $bin (the
# specstack binary) and $work (a scratch directory the tests own). It gives:
#   pids, cleanup on EXIT (servers and clients killed, $work removed),
#   pass / fail (fail prints the tail of every server log in $work),
#   start_server_on MODEL NAME ARGS... and copy_with_chat_template.
# Why one file: every such test started servers, parsed the listening port
# and cleaned up the same way, and a fix to one (e.g. creating the log before
# the background shell opens it) has to reach all of them.

pids=()
# Drain tests leave servers mid-shutdown: SERVE_KILL_SIGNAL=KILL there.
serve_cleanup() {
  for pid in "${pids[@]}"; do kill "-${SERVE_KILL_SIGNAL:-TERM}" "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap serve_cleanup EXIT

pass() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2
    tail -20 "$f" >&2
  done
  exit 1
}

# start_server_on MODEL NAME ARGS...: `specstack serve` on a free port of
# 127.0.0.1, stderr to $work/NAME.log; waits for its port. Sets $port and
# $server (its pid).
start_server_on() {
  local model=$1 name=$2
  shift 2
  # Created here: the background shell opens it asynchronously, and a first
  # sed on a missing file would end the script (set -e, pipefail).
  : > "$work/$name.log"
  port=
  "$bin" serve --model "$model" --port 0 --no-access-log "$@" 2>>"$work/$name.log" &
  server=$!
  pids+=("$server")
  for _ in $(seq 1 300); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/$name.log" | head -1)
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  fail "server $name did not start"
}

# copy_with_chat_template SRC DEST TEMPLATE: copies model folder SRC to DEST
# and sets tokenizer_config.json's chat_template to TEMPLATE (a Jinja string).
copy_with_chat_template() {
  cp -r "$1" "$2"
  node -e '
const fs = require("fs"); const [f, t] = process.argv.slice(1);
const c = JSON.parse(fs.readFileSync(f, "utf8"));
c.chat_template = t;
fs.writeFileSync(f, JSON.stringify(c, null, 2));' "$2/tokenizer_config.json" "$3"
}

# TinyStories has no chat template; the tests give their copy this one.
# shellcheck disable=SC2034  # used by the scripts that source this file
tinystories_chat_template='{% for m in messages %}{{ m["role"] }}: {{ m["content"] }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}'
