#!/usr/bin/env bash
# test_gw_curl: curl, the client every README and operator uses, against
# the stack (cached + engined on the tiny model + gatewayd with an admin
# token). A whole chat; the same chat streamed with -N: data: lines of
# chat.completion.chunk, [DONE] last, and the deltas adding up to the whole
# reply's content (greedy: the same text); a streamed text completion;
# x-session-id taken as the session (cached's resident session names it);
# /v1/models, /health, /metrics as Prometheus text; cache clear 401 without
# the bearer token and 200 with it; a malformed body a 400 in the OpenAI
# error shape; a 1.5 MB body, which curl sends with "Expect: 100-continue",
# answered (400: longer than the window) without a hang.
#
#   test_gw_curl.sh CACHED ENGINED GATEWAYD MODEL_DIR
set -u
cached=$1 engined=$2 gatewayd=$3 model=$4
tmp=$(mktemp -d /tmp/moor-gwcurl-XXXXXX)
run=$tmp/run
mkdir -m 700 "$run"
fail=0
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	if [ $fail -ne 0 ]; then
		for f in "$tmp"/*.log; do echo "---- $f"; cat "$f"; done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/../shlib.sh"

port=$(free_port)
base=http://127.0.0.1:$port
"$cached" --run-dir "$run" --device-gb 0.25 --host-gb 0.25 --mem-ceiling-gb 0.25 \
	--mem-peak-gb 0.25 --cache-gb 0.05 >"$tmp/cached.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -S "$run/admin.sock" ] && break; sleep 0.05; done
"$engined" --model "$model" --run-dir "$run" --threads 2 --grid 64 --window 4096 \
	>"$tmp/engined.log" 2>&1 &
pids+=($!)
MOOR_ADMIN_TOKEN=s3cret "$gatewayd" --model "$model" --run-dir "$run" \
	--listen "127.0.0.1:$port" --window 4096 >"$tmp/gatewayd.log" 2>&1 &
pids+=($!)
require "the stack did not turn green" 'wait_green "$base" 30'
J='Content-Type: application/json'

# ---- whole and streamed chat: the same text ----
body='{"model":"tiny","messages":[{"role":"user","content":"Say something."}],"max_tokens":12,"temperature":0}'
whole=$(curl -sS -m 60 "$base/v1/chat/completions" -H "$J" -d "$body")
check "whole chat: $whole" '[ "$(echo "$whole" | json "d[\"object\"], d[\"choices\"][0][\"message\"][\"role\"], d[\"usage\"][\"completion_tokens\"]")" = "chat.completion assistant 12" ]'
text=$(echo "$whole" | json 'd["choices"][0]["message"]["content"]')
sbody=${body%\}},\"stream\":true\}
curl -sS -N -m 60 "$base/v1/chat/completions" -H "$J" -d "$sbody" >"$tmp/stream.txt"
check "streamed chat: [DONE] is not the last event" '[ "$(grep -v "^$" "$tmp/stream.txt" | tail -1)" = "data: [DONE]" ]'
check "streamed chat: a line that is not an SSE data line" '! grep -v "^$" "$tmp/stream.txt" | grep -qv "^data: "'
stext=$(grep '^data: {' "$tmp/stream.txt" | sed 's/^data: //' | python3 -c '
import json, sys
out = []
for line in sys.stdin:
    d = json.loads(line)
    assert d["object"] == "chat.completion.chunk", d
    for c in d["choices"]:
        out.append(c["delta"].get("content") or "")
print("".join(out))')
check "the streamed deltas ('$stext') differ from the whole reply ('$text')" '[ "$stext" = "$text" ]'

# ---- a streamed text completion ----
curl -sS -N -m 60 "$base/v1/completions" -H "$J" \
	-d '{"prompt":"Once upon a time","max_tokens":5,"temperature":0,"stream":true}' >"$tmp/cstream.txt"
n=$(grep -c '^data: {"id":"cmpl-' "$tmp/cstream.txt")
check "streamed completion: $n chunks" '[ "$n" -ge 1 ] && [ "$(grep -v "^$" "$tmp/cstream.txt" | tail -1)" = "data: [DONE]" ]'

# ---- the session header ----
curl -sS -m 60 "$base/v1/chat/completions" -H "$J" -H 'x-session-id: curl-session-7' \
	-d "$body" >/dev/null
st=$(curl -sS -m 10 -H "Authorization: Bearer s3cret" "$base/v1/cache/stats")
rst=$(curl -sS -m 10 "$base/v1/cache/stats")
check "stats without the token name the session: $rst" '[[ $rst != *"curl-session-7"* && $rst == *"\"redacted\":true"* ]]'
check "x-session-id is not the resident session: $st" '[[ $st == *"curl-session-7"* ]]'

# ---- models, health, metrics ----
m=$(curl -sS -m 10 "$base/v1/models")
check "models: $m" '[ "$(echo "$m" | json "d[\"object\"], d[\"data\"][0][\"id\"]")" = "list tiny" ]'
check "health is not 200" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$base/health")" = 200 ]'
ct=$(curl -sS -m 10 -o "$tmp/metrics.txt" -w '%{content_type}' "$base/metrics")
check "metrics content type: $ct" '[[ $ct == text/plain* ]]'
check "metrics: no request counter" 'grep -q "^# TYPE moor_.* counter" "$tmp/metrics.txt"'

# ---- the admin token ----
code=$(curl -s -o "$tmp/clear.json" -w '%{http_code}' -X POST "$base/v1/cache/clear")
check "clear without the token: $code" '[ "$code" = 401 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer wrong' "$base/v1/cache/clear")
check "clear with a wrong token: $code" '[ "$code" = 401 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer s3cret' "$base/v1/cache/clear")
check "clear with the token: $code" '[ "$code" = 200 ]'

# ---- errors ----
code=$(curl -s -o "$tmp/err.json" -w '%{http_code}' "$base/v1/chat/completions" -H "$J" -d '{"messages": [')
check "malformed body: $code $(cat "$tmp/err.json")" \
	'[ "$code" = 400 ] && [ "$(json "d[\"error\"][\"type\"]" <"$tmp/err.json")" = invalid_request_error ]'
python3 -c '
import json
print(json.dumps({"messages": [{"role": "user", "content": "word " * 300000}], "max_tokens": 2}))' >"$tmp/big.json"
code=$(curl -s -m 60 -o "$tmp/big.out" -w '%{http_code}' "$base/v1/chat/completions" -H "$J" \
	--data-binary @"$tmp/big.json" -v 2>"$tmp/big.trace")
check "a 1.5 MB body: $code $(head -c 300 "$tmp/big.out")" \
	'[ "$code" = 400 ] && grep -q "window" "$tmp/big.out"'
check "curl did not send Expect: 100-continue (the case is not tested)" \
	'grep -qi "^> Expect: 100-continue" "$tmp/big.trace"'

echo "whole: $text | streamed: $stext"
[ $fail -eq 0 ] && echo "test_gw_curl: ok"
exit $fail
