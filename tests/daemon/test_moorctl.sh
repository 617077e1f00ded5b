#!/usr/bin/env bash
# test_moorctl: `moorctl stats` prints JSON with every cache; after one turn
# the resident prefix holds anchors; `moorctl clear --tier resident` empties
# it; a bad tier is refused with a clear error and exit 2, a clear of an
# NVMe tier this cached lacks (no --disk-dir) with exit 1; no cached at the
# run dir is exit 1 with a message naming the socket. `moorctl peek` prints
# where a prompt would resume as JSON, changes no cache's stats, and the
# turn that follows starts where it said (tier and cached tokens, from the
# engine's DONE); bad --ids are exit 2, a peek before any engine exit 1. Every wait is bounded
# (the polls, the clients' timeouts); meson's timeout bounds the whole.
set -u
cached=$1 engined=$2 moorctl=$3 client=$4 model=$5
run=$(mktemp -d /tmp/moor-moorctl-XXXXXX)
pids=()
fail=0
cleanup() {
	# SIGTERM first, so cached unlinks its arenas; -9 what is left
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for _ in $(seq 20); do
		alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive -eq 0 ] && break
		sleep 0.05
	done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ $fail -ne 0 ] && for f in "$run"/*.log; do echo "---- $f"; cat "$f"; done
	rm -rf "$run"
}
trap cleanup EXIT
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
# poll until log $1 says $2 and socket $3 exists, up to $4 polls of 50 ms
# (never by connecting: a stray connection can stall an NNG listener)
wait_ready() {
	for _ in $(seq "$4"); do
		grep -q "$2" "$1" 2>/dev/null && [ -S "$3" ] && return 0
		sleep 0.05
	done
	return 1
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

"$cached" --run-dir "$run" --device-gb 0.25 --host-gb 0.25 --mem-ceiling-gb 0.25 \
	--mem-peak-gb 0.25 --resident-gb 0.05 --resident-stash-gb 0.02 \
	--resident-pin-gb 0.02 --resident-park-gb 0.02 --cache-gb 0.05 \
	--store-entry-gb 0.02 >"$run/cached.log" 2>&1 & pids+=($!)
wait_ready "$run/cached.log" serving "$run/admin.sock" 400 || { echo "FAIL: cached did not come up"; fail=1; exit 1; }

out=$("$moorctl" --run-dir "$run" stats); rc=$?
check "stats: exit 0" '[ $rc -eq 0 ]'
for c in resident end stash pin park store; do
	check "stats has $c" '[ "$(echo "$out" | json "\"$c\" in d")" = True ]'
done
check "stats: engine object, null before any HELLO" '[ "$(echo "$out" | json "d[\"engine\"] == {\"attached\": False, \"pid\": None, \"window\": None, \"grid\": None}")" = True ]'
err=$("$moorctl" --run-dir "$run" peek --ids 1,2,3 2>&1); rc=$?
check "peek before an engine: exit 1, says so" '[ $rc -eq 1 ] && echo "$err" | grep -q "no engine attached"'

"$engined" --model "$model" --run-dir "$run" --grid 64 --window 1024 \
	>"$run/engined.log" 2>&1 & pids+=($!)
wait_ready "$run/engined.log" "serving on" "$run/engined.sock" 600 || { echo "FAIL: engined did not come up"; fail=1; exit 1; }
ids=$(seq -s, 1 150)
"$client" --run-dir "$run" --ids "$ids" --max-tokens 4 --ignore-eos --timeout-ms 30000 >"$run/turn.out" 2>&1
check "one turn" 'grep -q "done finish=length" "$run/turn.out"'

out=$("$moorctl" --run-dir "$run" stats)
epid=${pids[1]}
check "stats: engine attached, its pid, window and grid" '[ "$(echo "$out" | json "d[\"engine\"] == {\"attached\": True, \"pid\": $epid, \"window\": 1024, \"grid\": 64}")" = True ]'

# peek the same prompt: the rows in place hold it, the anchor at 128 is
# the latest line under 150 (one token is always forwarded)
before=$(echo "$out" | json "json.dumps({k: v for k, v in d.items() if k != \"daemon\"}, sort_keys=True)")
pk=$("$moorctl" --run-dir "$run" peek --ids "$ids" --session s1); rc=$?
check "peek: exit 0" '[ $rc -eq 0 ]'
echo "peek: $pk"
check "peek: resident at 128 of 150" '[ "$(echo "$pk" | json "d[\"tier\"] == \"resident\" and d[\"cached\"] == 128 and d[\"tokens\"] == 150 and d[\"taint\"] is None and d[\"restore_bytes\"] > 0")" = True ]'
"$moorctl" --run-dir "$run" peek --ids "$ids" >/dev/null
after=$("$moorctl" --run-dir "$run" stats | json "json.dumps({k: v for k, v in d.items() if k != \"daemon\"}, sort_keys=True)")
check "peek changes no cache's stats" '[ "$before" = "$after" ]'
"$client" --run-dir "$run" --ids "$ids" --max-tokens 4 --ignore-eos --timeout-ms 30000 >"$run/turn2.out" 2>&1
check "the turn after the peek starts where it said" 'grep -q "tier=1 prompt=150 cached=128" "$run/turn2.out"'
err=$("$moorctl" --run-dir "$run" peek --ids 1,x,3 2>&1); rc=$?
check "peek --ids 1,x,3: exit 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected token ids"'
err=$("$moorctl" --run-dir "$run" peek 2>&1); rc=$?
check "peek without --ids: exit 2" '[ $rc -eq 2 ]'
err=$("$moorctl" --run-dir "$run" peek --ids 1, 2>&1); rc=$?
check "peek --ids 1,: exit 2" '[ $rc -eq 2 ]'

out=$("$moorctl" --run-dir "$run" stats)
check "resident holds anchors after a turn" '[ "$(echo "$out" | json "d[\"resident\"][\"anchors\"] > 0")" = True ]'
check "end anchor kept" '[ "$(echo "$out" | json "d[\"end\"][\"have\"]")" = True ]'

"$moorctl" --run-dir "$run" clear --tier resident >/dev/null; rc=$?
check "clear --tier resident: exit 0" '[ $rc -eq 0 ]'
out=$("$moorctl" --run-dir "$run" stats)
check "resident empty after clear" '[ "$(echo "$out" | json "d[\"resident\"][\"anchors\"] == 0 and d[\"resident\"][\"bytes\"] == 0")" = True ]'

# a cached without --disk-dir has no NVMe tiers: stats says so, and cached
# refuses a clear of one (not an OK that emptied nothing); moorctl prints
# cached's reason and exits 1; "all" is fine
out=$("$moorctl" --run-dir "$run" stats)
check "stats: disk and spill off" '[ "$(echo "$out" | json "d[\"disk\"][\"on\"] is False and d[\"spill\"][\"on\"] is False")" = True ]'
err=$("$moorctl" --run-dir "$run" clear --tier disk 2>&1); rc=$?
check "clear --tier disk without a disk tier: exit 1, says so: $err" '[ $rc -eq 1 ] && echo "$err" | grep -q "no disk tier: cached runs without --disk-dir; nothing cleared"'
err=$("$moorctl" --run-dir "$run" clear --tier spill 2>&1); rc=$?
check "clear --tier spill without a spill: exit 1, says so: $err" '[ $rc -eq 1 ] && echo "$err" | grep -q "no session spill: cached runs without --disk-dir; nothing cleared"'
out2=$("$moorctl" --run-dir "$run" stats)
check "the refused clears changed no cache" '[ "$(echo "$out" | json "{k: v for k, v in d.items() if k not in (\"daemon\", \"memory\")}")" = "$(echo "$out2" | json "{k: v for k, v in d.items() if k not in (\"daemon\", \"memory\")}")" ]'
out=$("$moorctl" --run-dir "$run" clear --tier all 2>&1); rc=$?
check "clear --tier all without the NVMe tiers: exit 0: $out" '[ $rc -eq 0 ] && [ "$out" = "cleared all" ]'
err=$("$moorctl" --run-dir "$run" clear --tier bogus 2>&1); rc=$?
check "bad tier: exit 2" '[ $rc -eq 2 ]'
check "bad tier: names it and the choices" 'echo "$err" | grep -q "unknown tier .bogus." && echo "$err" | grep -q resident'
"$moorctl" --run-dir "$run" clear >/dev/null; rc=$?
check "clear (all): exit 0" '[ $rc -eq 0 ]'
err=$("$moorctl" --run-dir "$run/nowhere" --timeout-ms 500 stats 2>&1); rc=$?
check "no cached: exit 1, names the socket" '[ $rc -eq 1 ] && echo "$err" | grep -q "nowhere/admin.sock"'
err=$("$moorctl" frobnicate 2>&1); rc=$?
check "unknown command: exit 2" '[ $rc -eq 2 ]'

# journal --tail: the last N lines, the rotated file's before the current's
mkdir -p "$run/state"
printf '{"n":1}\n{"n":2}\n' >"$run/state/journal.jsonl.1"
printf '{"n":3}\n{"n":4}\n{"n":5}\n' >"$run/state/journal.jsonl"
out=$("$moorctl" journal --tail 4 --state-dir "$run/state")
check "journal --tail 4: lines 2 to 5" '[ "$(echo "$out" | tr -d "\n")" = "{\"n\":2}{\"n\":3}{\"n\":4}{\"n\":5}" ]'
out=$("$moorctl" journal --tail --state-dir "$run/state")
check "journal --tail: every line when fewer than 10" '[ "$(echo "$out" | wc -l)" -eq 5 ]'
err=$("$moorctl" journal --tail --state-dir "$run/nowhere" 2>&1); rc=$?
check "journal of no state dir: exit 1" '[ $rc -eq 1 ] && echo "$err" | grep -q "no journal"'
err=$("$moorctl" journal --state-dir "$run/state" 2>&1); rc=$?
check "journal without --tail: exit 2" '[ $rc -eq 2 ]'

[ $fail -eq 0 ] && echo "test_moorctl: ok"
exit $fail
