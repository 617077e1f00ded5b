#!/usr/bin/env bash
# test_gw_opencode_real: the real opencode client (npm opencode-ai 1.18.33,
# the oracle deploy/setup installs into .oracles) against deploy/run's stack
# on the tiny model, one session: `opencode run` (the title guest and turn
# 1, both cold), three `opencode run --continue`, then idle (the compaction
# preparer, --compaction-idle-s 5 --compaction-min-tokens 4096, writes the
# summary ahead with opencode 1.18.33's own text), the client's /compact
# (POST /session/:id/summarize of `opencode serve`, what the TUI's /compact
# calls) and one more `opencode run --continue`. Checked:
#
#   - every turn after the first resumes at the end anchor of the one
#     before it: gatewayd's journal (--state-dir) says source "end", tier
#     "resident", cached >= the previous turn's prompt as the engine read
#     it plus its completion less one (the end anchor sits at the last
#     position the engine forwarded; the last sampled token is not
#     forwarded yet), and reread (the new user message and the template's
#     glue) under 64;
#   - the compaction is answered from the prepared summary (source
#     "prepared", nothing re-read): the client's request is recognised and
#     its text is the default the server prepared with (compact.c);
#   - the turn after it resumes on the system prompt's head at least;
#   - the client's own record (`opencode export`, the usage it was sent):
#     every answer's tokens (input + cache.read the prompt, cache.read,
#     output) are the journal's prompt_tokens, cached (a compaction's: its
#     prompt less what was forwarded) and completion_tokens.
#
# How the client is kept offline and apart from the machine's own setup
# (checked under `unshare -n`, no network at all, on 2026-12-04): HOME and
# the XDG directories in the test's temp dir; OPENCODE_CONFIG a file that
# names one provider, "moor", through @ai-sdk/openai-compatible (bundled in
# the binary: nothing is installed for it) at the stack's port, model
# "tiny" with limit.context 16384 and limit.output 256 (opencode sends the
# output limit as max_tokens; its default 32000 is over the window) as
# model and small_model; OPENCODE_DISABLE_MODELS_FETCH=1 (no models.dev),
# OPENCODE_DISABLE_AUTOUPDATE=1, OPENCODE_DISABLE_DEFAULT_PLUGINS=1,
# OPENCODE_DISABLE_LSP_DOWNLOAD=1, OPENCODE_DISABLE_SHARE=1. What still
# reaches for the network is opencode's background `npm install
# @opencode-ai/plugin` into its config directory: offline it fails, the
# client logs "background dependency install failed" and goes on.
#
# MOOR_KEEP_TMP=1 keeps the temp dir (logs, journal, the client's home).
#
# Skips (77) with a line saying why under MOOR_NO_ORACLES=1, when the
# opencode-ai package is not in .oracles (deploy/setup installs it), or when
# its binary does not run on this host.
#
#   test_gw_opencode_real.sh SOURCE_ROOT BUILD_ROOT MODEL_DIR
set -u
src=$1 build=$2 model=$3
oc=$src/.oracles/node_modules/opencode-ai/bin/opencode.exe
if [ "${MOOR_NO_ORACLES:-}" = 1 ]; then
	echo "skip (MOOR_NO_ORACLES=1, a host without the npm oracles): the real opencode client is not here"
	exit 77
fi
if [ ! -x "$oc" ]; then
	echo "skip: the opencode-ai package is not in $src/.oracles (deploy/setup installs it from deploy/oracles/package.json)"
	exit 77
fi
if ! ocv=$(timeout 60 "$oc" --version 2>&1) || [ "$ocv" != 1.18.33 ]; then
	echo "skip: $oc does not run here or is not 1.18.33 (--version said: $ocv)"
	exit 77
fi

tmp=$(mktemp -d /tmp/moor-opencode-XXXXXX)
fail=0
rp=
cleanup() {
	if [ -n "$rp" ] && kill -0 "$rp" 2>/dev/null; then
		kill -TERM "$rp" 2>/dev/null
		for _ in $(seq 300); do kill -0 "$rp" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$rp" 2>/dev/null
	fi
	if [ $fail -ne 0 ]; then
		for f in "$tmp"/*.log "$tmp"/*.err "$tmp"/state/journal.jsonl; do
			[ -f "$f" ] && { echo "---- $f"; tail -c 20000 "$f"; }
		done
		f=$(ls "$tmp"/home/.local/share/opencode/log/*.log 2>/dev/null | tail -1)
		[ -n "$f" ] && { echo "---- opencode's log"; tail -c 8000 "$f"; }
	fi
	if [ -n "${MOOR_KEEP_TMP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
. "$(dirname "$0")/../shlib.sh"
wait_log() { # FILE REGEX SECONDS
	local end=$((SECONDS + $3))
	while [ $SECONDS -lt $end ]; do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		kill -0 "$rp" 2>/dev/null || return 1
		sleep 0.2
	done
	return 1
}

# ---- the stack: deploy/run, as a user starts it ----
port=$(free_port)
mkdir -p "$tmp/state" "$tmp/home" "$tmp/proj"
MOOR_BUILD=$build \
	MOOR_CACHED_ARGS="--device-gb 0.5 --host-gb 0.5 --mem-ceiling-gb 0.5 --mem-peak-gb 0.5 --cache-gb 0.1 --log-level debug" \
	MOOR_GATEWAYD_ARGS="--state-dir $tmp/state --log-level debug --compaction-idle-s 5 --compaction-min-tokens 4096" \
	"$src/deploy/run" --no-setup --model "$model" --port "$port" --run-dir "$tmp/run" \
	--threads 2 --window 16384 --disk-dir '' >"$tmp/run.log" 2>&1 &
rp=$!
require "deploy/run did not print its address" \
	"wait_log '$tmp/run.log' 'serving tiny at http://127.0.0.1:$port/v1' 120"

# ---- the client, offline and in its own home ----
cat >"$tmp/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "moor": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "moor",
      "options": { "baseURL": "http://127.0.0.1:$port/v1", "apiKey": "none" },
      "models": { "tiny": { "name": "tiny", "limit": { "context": 16384, "output": 256 } } }
    }
  },
  "model": "moor/tiny",
  "small_model": "moor/tiny",
  "autoupdate": false,
  "share": "disabled"
}
EOF
echo "# A test project" >"$tmp/proj/AGENTS.md"
(cd "$tmp/proj" && git init -q . 2>/dev/null)
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home/.config XDG_DATA_HOME=$tmp/home/.local/share
export XDG_CACHE_HOME=$tmp/home/.cache XDG_STATE_HOME=$tmp/home/.local/state
export OPENCODE_CONFIG=$tmp/opencode.json OPENCODE_DISABLE_MODELS_FETCH=1
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1
export OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1
unset OPENCODE_CONFIG_DIR OPENCODE_CONFIG_CONTENT

turn() { # N [--continue]
	local n=$1
	shift
	(cd "$tmp/proj" && timeout 240 "$oc" run "$@" --model moor/tiny \
		"Turn $n: say something short." >"$tmp/oc$n.log" 2>"$tmp/oc$n.err")
	local st=$?
	require "opencode run $* (turn $n) exited $st" '[ $st -eq 0 ]'
}
turn 1
turn 2 --continue
turn 3 --continue
turn 4 --continue

# ---- /compact: the client's summarize, through `opencode serve` ----
sid=$(cd "$tmp/proj" && timeout 60 "$oc" session list --format json 2>/dev/null |
	python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])' 2>/dev/null)
require "opencode session list names no session" '[ -n "$sid" ]'
# idle: the preparer writes the summary ahead with opencode 1.18.33's text
require "the preparer did not write session $sid's summary ahead" \
	"wait_log '$tmp/run.log' 'prepared the summary of session $sid' 180"
sport=$(free_port)
(cd "$tmp/proj" && exec "$oc" serve --hostname 127.0.0.1 --port "$sport") >"$tmp/serve.log" 2>&1 &
sp=$!
for _ in $(seq 120); do
	curl -s -o /dev/null -m 2 "http://127.0.0.1:$sport/session" && break
	sleep 0.5
done
sum=$(curl -s -m 240 -X POST "http://127.0.0.1:$sport/session/$sid/summarize?directory=$tmp/proj" \
	-H 'Content-Type: application/json' -d '{"providerID":"moor","modelID":"tiny"}')
kill -TERM "$sp" 2>/dev/null
for _ in $(seq 50); do kill -0 "$sp" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$sp" 2>/dev/null
wait "$sp" 2>/dev/null
check "summarize answered $sum" '[ "$sum" = true ]'
turn 5 --continue

# ---- what the server says: the journal ----
(cd "$tmp/proj" && timeout 60 "$oc" export "$sid" >"$tmp/export.json" 2>"$tmp/export.err")
check "opencode export $sid failed" '[ -s "$tmp/export.json" ]'

out=$(python3 - "$tmp/state/journal.jsonl" "$tmp/export.json" "$sid" <<'EOF'
import json, sys
jl, ex, sid = sys.argv[1:4]
lines = [json.loads(l) for l in open(jl)]
bad = []
def say(m):
    bad.append(m)
if any(l["session"] != sid for l in lines):
    say("a journal line of another session than %s: %s" % (sid, [l["session"] for l in lines]))
# in order: the title request (opencode's small guest, no tools, ~540
# tokens) and turn 1, turns 2 to 4, the compaction, turn 5
ci = [i for i, l in enumerate(lines) if l["source"] in ("prepared", "continuation")]
if len(ci) != 1:
    say("want one compaction in the journal, it has %d" % len(ci))
    ci = [len(lines)]
before, comp, after = lines[:ci[0]], lines[ci[0]:ci[0] + 1], lines[ci[0] + 1:]
turns = [l for l in before if l["prompt_tokens"] >= 2000]
titles = [l for l in before if l["prompt_tokens"] < 2000]
if len(titles) != 1:
    say("want one title request, the journal has %d" % len(titles))
if len(turns) < 4:
    say("want at least 4 turns before the compaction, the journal has %d" % len(turns))
if turns and turns[0]["source"] not in ("none", "anchor"):
    say("turn 1 resumed from %s: nothing of it was there" % turns[0]["source"])
for i in range(1, len(turns)):
    p, t = turns[i - 1], turns[i]
    cover = p["read"] + p["completion_tokens"] - 1
    print("turn %d: source %s tier %s prompt %d read %d cached %d reread %d aligned %s (previous: read %d + %d generated)"
          % (i + 1, t["source"], t["tier"], t["prompt_tokens"], t["read"], t["cached"],
             t["reread"], t["aligned"], p["read"], p["completion_tokens"]))
    if t["source"] != "end" or t["tier"] != "resident":
        say("turn %d resumed from %s/%s, not the end anchor" % (i + 1, t["source"], t["tier"]))
    if t["cached"] < cover:
        say("turn %d: cached %d does not cover the previous turn (%d)" % (i + 1, t["cached"], cover))
    if not 0 < t["reread"] < 64:
        say("turn %d re-read %d tokens (want the new message and the glue)" % (i + 1, t["reread"]))
# the compaction: the summary the preparer wrote ahead, with opencode
# 1.18.33's own text, is what the client's /compact gets
for c in comp:
    print("compaction: source %s prompt %d read %d cached %d reread %d completion %d"
          % (c["source"], c["prompt_tokens"], c["read"], c["cached"], c["reread"], c["completion_tokens"]))
    if c["source"] != "prepared" or c["reread"] != 0 or c["completion_tokens"] < 1:
        say("the compaction was not answered from the prepared summary: %s" % c["source"])
# the turn after it: the client's summary and a new message after its
# system prompt; answered, resuming at least on that head
for t in after:
    print("after the compaction: source %s prompt %d cached %d reread %d"
          % (t["source"], t["prompt_tokens"], t["cached"], t["reread"]))
    if t["source"] == "none" or t["cached"] < 1024:
        say("the turn after the compaction resumed nothing (%s, %d)" % (t["source"], t["cached"]))
if len(after) < 1:
    say("no turn after the compaction")
# the client's record: the usage it was sent (input is the client's count
# less the cached: prompt_tokens stays the client's count when the
# alignment serves the rows' spelling), one answer per journal line but
# the title's
try:
    msgs = [m["info"] for m in json.load(open(ex))["messages"] if m["info"]["role"] == "assistant"]
except Exception as e:
    msgs = []
    say("opencode export is not the session's JSON: %s" % e)
served = turns + comp + after
if len(msgs) != len(served):
    say("opencode recorded %d answers, the journal %d" % (len(msgs), len(served)))
# (a compaction's cached_tokens: its prompt less what was forwarded)
for i in range(min(len(msgs), len(served))):
    t, j = msgs[i]["tokens"], served[i]
    want = min(j["cached"], j["prompt_tokens"])
    if j in comp:
        want = max(0, j["prompt_tokens"] - j["reread"])
    if t["cache"]["read"] != want or t["input"] + t["cache"]["read"] != j["prompt_tokens"] \
            or t["output"] != j["completion_tokens"]:
        say("answer %d: the client recorded input %d cache.read %d output %d, the journal prompt %d cached %d completion %d"
            % (i + 1, t["input"], t["cache"]["read"], t["output"], j["prompt_tokens"], j["cached"],
               j["completion_tokens"]))
for b in bad:
    print("BAD: " + b)
print("checked %d turns" % len(served))
EOF
)
echo "$out"
check "the journal or the client's record" '! grep -q "^BAD: " <<<"$out" && grep -q "^checked " <<<"$out"'
[ $fail -eq 0 ] && echo "test_gw_opencode_real: ok (opencode $ocv)"
exit $fail
