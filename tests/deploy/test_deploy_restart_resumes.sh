#!/usr/bin/env bash
# test_deploy_restart_resumes: a planned restart of the whole stack loses no
# conversation. Through deploy/run (--no-setup, this build, a temp run dir
# and disk dir):
#   - turn 1 of a chat of about 7,600 tokens (x-session-id), greedy, 8
#     tokens; the peek of turn 2 says where it would resume;
#   - SIGTERM to deploy/run: it exits 0, cached's drain writes the
#     conversation to the session spill ([spill] saved);
#   - deploy/run again on the same dirs: cached reads it back ([spill] read
#     back) when engined attaches; turn 2 resumes at the end anchor, at the
#     line the peek gave before the restart: cached_tokens = turn 1's prompt
#     + the generation its state absorbed (its 8 tokens less the last one
#     sampled), tier end_anchor;
#   - turn 2 writes the same greedy text as on a stack that never stopped:
#     POST /v1/cache/clear?tier=all empties the RAM caches and the spill
#     (turn 1 again is cold: cached_tokens 0), and turn 2 resumes at the
#     same end anchor in RAM. (An end anchor's state was written by decode,
#     so the text is compared with a resume at the same anchor, not with a
#     cold prefill of turn 2: the greedy gate.)
#   test_deploy_restart_resumes.sh SOURCE_ROOT BUILD_ROOT MODEL_DIR
set -u
src=$1 build=$2 model=$3
tmp=$(mktemp -d /tmp/moor-restart-XXXXXX)
fail=0
rp=
cleanup() {
	if [ -n "$rp" ]; then
		kill -TERM "$rp" 2>/dev/null
		wait "$rp" 2>/dev/null
	fi
	if [ $fail -ne 0 ]; then
		for f in "$tmp"/*.log; do echo "---- $f"; cat "$f"; done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/../shlib.sh"
wait_log() { # file regex seconds
	local end=$((SECONDS + $3))
	while [ $SECONDS -lt $end ]; do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

port=$(free_port)
base=http://127.0.0.1:$port
flags=(--no-setup --model "$model" --port "$port" --threads 2 --grid 1024
	--window 8192 --run-dir "$tmp/run" --disk-dir "$tmp/disk")
# the admin token (peek, clear, the session parts of stats need it)
export MOOR_ADMIN_TOKEN=restart-admin-token
A="Authorization: Bearer $MOOR_ADMIN_TOKEN"
# the spill writes whatever the drive has free (its floor, 50 GB by
# default, is the disk tier's: a test machine may have less)
up() { # log
	MOOR_BUILD=$build MOOR_CACHED_ARGS="--disk-cache-min-free-gb 0" \
		"$src/deploy/run" "${flags[@]}" >"$1" 2>&1 &
	rp=$!
	require "deploy/run did not print its address ($1)" \
		"wait_log '$1' 'serving tiny at http://127.0.0.1:$port/v1' 120"
}
down() {
	kill -TERM "$rp"
	wait "$rp"
	st=$?
	rp=
}
chat() { # body-file -> response JSON
	curl -s -m 300 "$base/v1/chat/completions" -H 'Content-Type: application/json' \
		-H 'x-session-id: restart-1' --data-binary "@$1"
}

# a system text of about 7,600 tokens (a length whose answer the copy
# aligns to the end anchor: the text alignment is gatewayd's), the same bytes every turn
python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
sys_text = " ".join("Rule %d: keep the answer short and check every step twice." % i
                    for i in range(480))
t1 = {"messages": [{"role": "system", "content": sys_text},
                   {"role": "user", "content": "Hello, how are you?"}],
      "max_tokens": 8, "temperature": 0, "ignore_eos": True}
json.dump(t1, open(d + "/t1.json", "w"))
EOF

up "$tmp/run1.log"
r1=$(chat "$tmp/t1.json")
p1=$(echo "$r1" | json 'd["usage"]["prompt_tokens"]' 2>/dev/null)
g1=$(echo "$r1" | json 'd["usage"]["completion_tokens"]' 2>/dev/null)
require "turn 1: $r1" '[ "${g1:-0}" = 8 ] && [ "${p1:-0}" -ge 5000 ]'
echo "$r1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
t = json.load(open(sys.argv[1] + "/t1.json"))
t["messages"].append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
t["messages"].append({"role": "user", "content": "And then?"})
json.dump(t, open(sys.argv[1] + "/t2.json", "w"))' "$tmp"
pk=$(curl -s -m 30 "$base/v1/cache/peek" -H 'Content-Type: application/json' -H "$A" \
	-H 'x-session-id: restart-1' --data-binary "@$tmp/t2.json")
pc=$(echo "$pk" | json 'd["cached_tokens"]' 2>/dev/null)
pt=$(echo "$pk" | json 'd["tier"]' 2>/dev/null)
want=$((p1 + g1 - 1))
check "before the restart turn 2 would resume at the end anchor ($want): $pk" \
	'[ "${pc:-0}" = "$want" ]'

# ---- the planned restart ----
down
check "deploy/run stopped with $st, want 0" '[ $st -eq 0 ]'
check "cached's drain did not write the conversation" \
	"grep -q '\[spill\] saved [0-9a-f]*: $want tokens (end kept' '$tmp/run1.log'"
up "$tmp/run2.log"
check "cached did not read the conversation back" \
	"wait_log '$tmp/run2.log' '\[spill\] read back [0-9a-f]*: $want tokens' 30"
r2=$(chat "$tmp/t2.json")
c2=$(echo "$r2" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
tier2=$(echo "$r2" | json 'd["usage"]["moor"]["tier"]' 2>/dev/null)
check "after the restart turn 2 did not resume at the end anchor $want: cached $c2, tier $tier2 (peek said $pt)" \
	'[ "${c2:-0}" = "$want" ]'
a2=$(echo "$r2" | json 'd["choices"][0]["message"]["content"]' 2>/dev/null)
mt=$(curl -s -m 10 "$base/metrics")
check "/metrics does not count the restore" \
	'echo "$mt" | grep -q "^moor_spill_total{what=\"restores\"} 1$"'
# the free-space floor's counters (0 here: the floor is 0)
check "/metrics lacks the spill's floor counters" \
	'echo "$mt" | grep -q "^moor_spill_total{what=\"floor_binds\"} 0$" &&
	 echo "$mt" | grep -q "^moor_spill_total{what=\"floor_evicted\"} 0$"'

# ---- the same two turns on a stack that never stopped ----
cl=$(curl -s -m 30 -X POST -H "$A" "$base/v1/cache/clear?tier=all")
st=$(curl -s -m 30 -H "$A" "$base/v1/cache/stats")
check "clear ?tier=all left spill entries: $cl $st" \
	'[ "$(echo "$st" | json "d[\"spill\"][\"entries\"]")" = 0 ]'
r1b=$(chat "$tmp/t1.json")
c1b=$(echo "$r1b" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
check "turn 1 after the clear resumed from somewhere: $c1b" '[ "${c1b:-1}" = 0 ]'
check "turn 1 again wrote another answer" \
	'[ "$(echo "$r1b" | json "d[\"choices\"][0][\"message\"][\"content\"]")" = "$(echo "$r1" | json "d[\"choices\"][0][\"message\"][\"content\"]")" ]'
r3=$(chat "$tmp/t2.json")
c3=$(echo "$r3" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
a3=$(echo "$r3" | json 'd["choices"][0]["message"]["content"]' 2>/dev/null)
check "turn 2 without a restart resumed at $c3, want $want" '[ "${c3:-0}" = "$want" ]'
check "turn 2 from the spill wrote '$a2', without a restart '$a3'" '[ -n "$a2" ] && [ "$a2" = "$a3" ]'
echo "restart: turn 1 $p1 + $g1 tokens; turn 2 after the restart cached $c2 ($tier2)"
down
check "deploy/run stopped with $st, want 0" '[ $st -eq 0 ]'

[ $fail -eq 0 ] && echo "test_deploy_restart_resumes: ok"
exit $fail
