#!/usr/bin/env bash
# test_deploy_disk_kill: a kill -9 of cached loses no shared head. Through
# deploy/run (--no-setup, this build, a temp run dir and disk dir, the
# free-space floor at 0 for the test's file system):
#   - turn 1 of a chat of about 6,000 tokens (x-session-id: its session's
#     first long request), greedy; the disk tier's writer writes the head
#     anchors and their chunks (/v1/cache/stats: disk.anchors, nothing
#     pending);
#   - kill -9 of cached (its pid from deploy/run's log): no drain runs, the
#     RAM caches and the resident rows are gone; deploy/run starts it again
#     and engined attaches to it;
#   - turn 2 resumes from the disk tier (tier nvme_disk, cached_tokens the
#     largest head anchor line below its prompt, a multiple of the grid),
#     never from a torn file;
#   - the same turn 2 on an empty stack (POST /v1/cache/clear?tier=all: RAM,
#     spill and disk) prefills cold and writes the same greedy text: the
#     disk's rows and state are a cold grid prefill's, bit for bit.
#   test_deploy_disk_kill.sh SOURCE_ROOT BUILD_ROOT MODEL_DIR
set -u
src=$1 build=$2 model=$3
tmp=$(mktemp -d /tmp/moor-disk-kill-XXXXXX)
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
log=$tmp/run.log
# the admin token (clear, the session parts of stats need it)
export MOOR_ADMIN_TOKEN=disk-kill-admin-token
A="Authorization: Bearer $MOOR_ADMIN_TOKEN"
MOOR_BUILD=$build MOOR_CACHED_ARGS="--disk-cache-min-free-gb 0" \
	"$src/deploy/run" "${flags[@]}" >"$log" 2>&1 &
rp=$!
require "deploy/run did not print its address" \
	"wait_log '$log' 'serving tiny at http://127.0.0.1:$port/v1' 120"
chat() { # body-file -> response JSON
	curl -s -m 300 "$base/v1/chat/completions" -H 'Content-Type: application/json' \
		-H 'x-session-id: disk-kill-1' --data-binary "@$1"
}
stat() { curl -s -m 30 -H "$A" "$base/v1/cache/stats"; }

python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
sys_text = " ".join("Tool %d: read the file, then answer in one line." % i
                    for i in range(420))
t1 = {"messages": [{"role": "system", "content": sys_text},
                   {"role": "user", "content": "List the files."}],
      "max_tokens": 6, "temperature": 0, "ignore_eos": True}
json.dump(t1, open(d + "/t1.json", "w"))
EOF
r1=$(chat "$tmp/t1.json")
p1=$(echo "$r1" | json 'd["usage"]["prompt_tokens"]' 2>/dev/null)
require "turn 1: $r1" '[ "${p1:-0}" -ge 5000 ]'
echo "$r1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
t = json.load(open(sys.argv[1] + "/t1.json"))
t["messages"].append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
t["messages"].append({"role": "user", "content": "And the tests?"})
json.dump(t, open(sys.argv[1] + "/t2.json", "w"))' "$tmp"

# the writer writes the head while nothing else runs
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do
	s=$(stat)
	na=$(echo "$s" | json 'd["disk"]["anchors"]' 2>/dev/null)
	pe=$(echo "$s" | json 'd["disk"]["pending"]' 2>/dev/null)
	[ "${na:-0}" -ge 1 ] && [ "${pe:-1}" = 0 ] && break
	sleep 0.2
done
check "the disk tier wrote no head anchor for turn 1: $s" '[ "${na:-0}" -ge 1 ]'

# ---- kill -9 cached ----
cpid=$(sed -n 's/.*started cached (pid \([0-9]*\)).*/\1/p' "$log" | tail -1)
require "no cached pid in deploy/run's log" '[ -n "$cpid" ]'
kill -KILL "$cpid"
require "deploy/run did not start cached again" \
	"wait_log '$log' 'cached exited \(status 137\)' 30"
require "the stack is not green after cached's restart" 'wait_green "$base" 60'
# engined attaches to the new cached: the first turn may wait for it
r2=
for i in 1 2 3 4 5 6 7 8 9 10; do
	r2=$(chat "$tmp/t2.json")
	echo "$r2" | grep -q '"usage"' && break
	sleep 1
done
c2=$(echo "$r2" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
tier2=$(echo "$r2" | json 'd["usage"]["moor"]["tier"]' 2>/dev/null)
a2=$(echo "$r2" | json 'd["choices"][0]["message"]["content"]' 2>/dev/null)
check "after the kill turn 2 did not resume from the disk: cached ${c2:-?}, tier ${tier2:-?}: $r2" \
	'[ "${c2:-0}" -ge 1024 ] && [ $((c2 % 1024)) = 0 ] && [ "$tier2" = nvme_disk ]'
s=$(stat)
check "the disk tier counts no hit: $s" \
	'[ "$(echo "$s" | json "d[\"disk\"][\"hits\"]")" = 1 ] && [ "$(echo "$s" | json "d[\"disk\"][\"hit_failed\"]")" = 0 ]'
mt=$(curl -s -m 10 "$base/metrics")
check "/metrics does not count the disk hit" \
	'echo "$mt" | grep -q "^moor_disk_total{what=\"hits\"} 1$"'
# the day's writes are the ledger's (LMDB): kept across the kill -9
dw=$(echo "$s" | json 'd["disk_writes"]["tier"]' 2>/dev/null)
check "/metrics' day's disk writes are not the stats' ${dw:-?} (or none): $(echo "$mt" | grep '^moor_disk_write')" \
	'[ "${dw:-0}" -gt 0 ] && echo "$mt" | grep -q "^moor_disk_writes_bytes{who=\"tier\"} $dw$" && echo "$mt" | grep -q "^moor_disk_write_budget_bytes 200000000000$"'

# ---- the same turn 2 cold ----
cl=$(curl -s -m 30 -X POST -H "$A" "$base/v1/cache/clear?tier=all")
s=$(stat)
check "clear ?tier=all left disk files: $cl $s" \
	'[ "$(echo "$s" | json "d[\"disk\"][\"anchors\"]")" = 0 ]'
r3=$(chat "$tmp/t2.json")
c3=$(echo "$r3" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
a3=$(echo "$r3" | json 'd["choices"][0]["message"]["content"]' 2>/dev/null)
check "turn 2 after the clear resumed from somewhere: $c3" '[ "${c3:-1}" = 0 ]'
check "turn 2 from the disk wrote '$a2', cold '$a3'" '[ -n "$a2" ] && [ "$a2" = "$a3" ]'
echo "disk kill: turn 1 $p1 tokens; turn 2 after kill -9 of cached: cached $c2 ($tier2)"
kill -TERM "$rp"
wait "$rp"
st=$?
rp=
check "deploy/run stopped with $st, want 0" '[ $st -eq 0 ]'
[ $fail -eq 0 ] && echo "test_deploy_disk_kill: ok"
exit $fail
