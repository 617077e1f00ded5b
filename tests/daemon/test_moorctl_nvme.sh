#!/usr/bin/env bash
# test_moorctl_nvme: moorctl against the NVMe tiers, end to end through the
# real daemons and the tiny model (cached with --disk-dir: the disk tier
# from 64 tokens, the session spill from 64, no free-space floor).
#
#   1. `moorctl stats` has the disk and spill objects, on, with their
#      counters (and disk_writes); after two conversations that share a
#      600-token head (sessions sA then sB: A is parked) the disk tier
#      holds anchors.
#   2. SIGTERM of cached: it exits 0 and its drain writes both to the spill
#      (B the rows in place, A from the park). A new cached on the same
#      dirs reads B back into RAM when the running engined says HELLO.
#      `moorctl peek` of B's next turn: RAM (its end anchor, read_ms 0); of
#      A's next turn: tier "spill" at A's end anchor, read_ms > 0,
#      restore_bytes > 0; the peek changes no stats, and A's next turn
#      resumes where it said (tier and cached tokens from the engine's
#      DONE, as test_moorctl does for RAM).
#   3. `moorctl clear --tier disk` empties the disk tier and leaves the
#      spill and RAM as they were; a new session writes the disk tier
#      again; `--tier spill` empties the spill and leaves the disk tier and
#      RAM; after another SIGTERM and restart (the spill holds the drained
#      conversation again) `--tier ram` empties RAM alone and `--tier all`
#      every tier.
# Every wait is bounded (polls with a count, the clients' timeouts);
# meson's timeout bounds the whole. The test ends only the processes it
# started, by pid.
#   test_moorctl_nvme.sh CACHED ENGINED MOORCTL CLIENT MODEL_DIR
set -u
cached=$1 engined=$2 moorctl=$3 client=$4 model=$5
run=$(mktemp -d /tmp/moor-moorctl-nvme-XXXXXX)
nvme=$run/nvme
cpid= epid=
fail=0
stop() { # pid: SIGTERM, up to 10 s, then -9; the exit status in $st
	st=
	kill "$1" 2>/dev/null
	for _ in $(seq 200); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.05
	done
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	st=$?
}
cleanup() {
	[ -n "$epid" ] && stop "$epid"
	[ -n "$cpid" ] && stop "$cpid"
	[ $fail -ne 0 ] && for f in "$run"/*.log "$run"/*.out; do echo "---- $f"; cat "$f"; done
	rm -rf "$run"
}
trap cleanup EXIT
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
die() { echo "FAIL: $1"; fail=1; exit 1; }
# poll until file $1 has a line matching $2 (grep -E), up to $3 polls of 50 ms
wait_log() {
	for _ in $(seq "$3"); do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
stats() { "$moorctl" --run-dir "$run" stats; }
# what each tier holds (not its counters of events): {"ram": {...},
# "spill": {...}, "disk": {...}}, sorted, for before/after comparisons
held() {
	stats | python3 -c '
import json, sys
d = json.load(sys.stdin)
keep = ("anchors", "bytes", "tokens", "entries", "rows", "have", "len",
        "lines", "blocks", "chunks")
ram = {t: {k: d[t][k] for k in keep if k in d[t]}
       for t in ("resident", "end", "stash", "pin", "park", "store")}
print(json.dumps({"ram": ram,
                  "spill": {k: d["spill"][k] for k in ("entries", "bytes")},
                  "disk": {k: d["disk"][k] for k in ("anchors", "chunks", "bytes", "lines")}},
                 sort_keys=True))'
}
part() { python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)[\"$1\"], sort_keys=True))"; }
# every tier of the held counts $1 holds something
full() { [ "$(echo "$1" | json 'd["disk"]["anchors"] > 0 and d["spill"]["entries"] > 0 and d["ram"]["resident"]["anchors"] > 0')" = True ]; }
# tier $1 the same in the held counts $2 and $3
left() { [ "$(echo "$2" | part "$1")" = "$(echo "$3" | part "$1")" ]; }
# poll until the disk tier's writer has nothing queued and holds anchors
# (the writes never hold a request: they land while the next one runs)
wait_disk() {
	for _ in $(seq 200); do
		[ "$(stats | json 'd["disk"]["pending"] == 0 and d["disk"]["anchors"] > 0')" = True ] && return 0
		sleep 0.05
	done
	return 1
}

cflags=(--device-gb 0.25 --host-gb 0.25 --mem-ceiling-gb 0.25 --mem-peak-gb 0.25
	--resident-gb 0.05 --resident-stash-gb 0.02 --resident-pin-gb 0.02
	--resident-park-gb 0.02 --cache-gb 0.05 --store-entry-gb 0.02
	--disk-dir "$nvme" --disk-cache-min-tokens 64 --session-spill-min-tokens 64
	--disk-cache-min-free-gb 0)
start_cached() { # log
	"$cached" --run-dir "$run" "${cflags[@]}" >"$run/$1" 2>&1 &
	cpid=$!
	wait_log "$run/$1" serving 400 && [ -S "$run/admin.sock" ] ||
		die "cached did not come up ($1)"
}
turn() { # out ids session
	"$client" --run-dir "$run" --ids "$2" --session "$3" --max-tokens 4 \
		--ignore-eos --timeout-ms 60000 >"$run/$1" 2>&1
	grep -q "done finish=length" "$run/$1" || die "the turn of $1 got no DONE"
}
# the next turn's ids: the prompt, the 4 generated ids, then $3
next_ids() { echo "$1,$(head -1 "$run/$2" | tr ' ' ','),$3"; }

# ---- 1. stats with both tiers ----
start_cached cached1.log
out=$(stats); rc=$?
check "stats: exit 0" '[ $rc -eq 0 ]'
check "stats: disk on, with its counters" '[ "$(echo "$out" | json "d[\"disk\"][\"on\"] is True and all(k in d[\"disk\"] for k in (\"anchors\", \"chunks\", \"bytes\", \"budget\", \"pending\", \"hits\", \"bytes_read\", \"bytes_written\", \"read_bps\", \"written_today\"))")" = True ]'
check "stats: spill on, with its counters" '[ "$(echo "$out" | json "d[\"spill\"][\"on\"] is True and all(k in d[\"spill\"] for k in (\"entries\", \"bytes\", \"budget\", \"saves\", \"restores\", \"hits\", \"bytes_read\", \"bytes_written\"))")" = True ]'
check "stats: disk_writes" '[ "$(echo "$out" | json "\"disk_writes\" in d")" = True ]'

"$engined" --model "$model" --run-dir "$run" --threads 2 --grid 64 --window 4096 \
	>"$run/engined.log" 2>&1 &
epid=$!
wait_log "$run/engined.log" "serving on" 600 && [ -S "$run/engined.sock" ] ||
	die "engined did not come up"

# two conversations of 700 tokens sharing a head of 600: B's turn parks A
head=$(seq -s, 1000 1599)
a1="$head,$(seq -s, 2000 2099)" b1="$head,$(seq -s, 3000 3099)"
turn a1.out "$a1" sA
turn b1.out "$b1" sB
wait_disk || check "the disk tier wrote no anchor" false
out=$(stats)
check "stats: the disk tier holds anchors and counts its writes" '[ "$(echo "$out" | json "d[\"disk\"][\"anchors\"] > 0 and d[\"disk\"][\"chunks\"] > 0 and d[\"disk\"][\"bytes_written\"] > 0")" = True ]'
check "stats: A parked" '[ "$(echo "$out" | json "d[\"park\"][\"session\"] == \"sA\" and d[\"park\"][\"tokens\"] == 703")" = True ]'
disk1=$(echo "$out" | part disk | json 'd["anchors"]')

# ---- 2. the drain, a new cached, peek from the spill ----
stop "$cpid"; cpid=
check "cached stopped with $st after SIGTERM, want 0" '[ "$st" = 0 ]'
check "the drain wrote both conversations" '[ "$(grep -c "\[spill\] saved [0-9a-f]*: 703 tokens (end kept" "$run/cached1.log")" = 2 ] && grep -q "drain: done" "$run/cached1.log"'
start_cached cached2.log
# the running engined says HELLO to the new cached by itself
wait_log "$run/cached2.log" '\[spill\] read back [0-9a-f]*: 703 tokens' 400 ||
	check "cached2 read nothing back" false
wait_log "$run/cached2.log" "engined pid $epid attached" 200 ||
	check "engined did not attach to cached2" false
out=$(stats)
check "stats after the restart: 2 spill entries, 1 restore, the disk tier's anchors kept" '[ "$(echo "$out" | json "d[\"spill\"][\"entries\"] == 2 and d[\"spill\"][\"restores\"] == 1 and d[\"disk\"][\"anchors\"] == $disk1")" = True ]'

b2=$(next_ids "$b1" b1.out "$(seq -s, 5000 5049)")
pk=$("$moorctl" --run-dir "$run" peek --ids "$b2" --session sB); rc=$?
echo "peek B: $pk"
check "peek of B (read back into RAM): its end anchor, no read" '[ $rc -eq 0 ] && [ "$(echo "$pk" | json "d[\"tier\"] in (\"end\", \"resident\") and d[\"cached\"] == 703 and d[\"read_ms\"] == 0")" = True ]'

a2=$(next_ids "$a1" a1.out "$(seq -s, 4000 4049)")
# the stats but the daemon's own and the file system's free bytes (other
# processes write to it)
counters() {
	stats | json 'json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "free"} if k == "disk" else v) for k, v in d.items() if k != "daemon"}, sort_keys=True)'
}
before=$(counters)
pk=$("$moorctl" --run-dir "$run" peek --ids "$a2" --session sA); rc=$?
echo "peek A: $pk"
check "peek of A: exit 0" '[ $rc -eq 0 ]'
check "peek of A: the spill at its end anchor 703 of 754, a read" '[ "$(echo "$pk" | json "d[\"tier\"] == \"spill\" and d[\"cached\"] == 703 and d[\"tokens\"] == 754 and d[\"read_ms\"] > 0 and d[\"restore_bytes\"] > 0")" = True ]'
after=$(counters)
check "the peeks changed no stats" '[ "$before" = "$after" ]'
turn a2.out "$a2" sA
check "A's next turn resumed where the peek said (tier=7: spill)" 'grep -q "tier=7 prompt=754 cached=703" "$run/a2.out"'
check "stats count the spill's hit" '[ "$(stats | json "d[\"spill\"][\"hits\"] == 1 and d[\"tiers\"][\"spill\"] == 1")" = True ]'

# ---- 3. clear by tier ----
wait_disk || check "the disk tier's writer did not settle" false
h0=$(held)
check "before the clears every tier holds something: $h0" 'full "$h0"'
out=$("$moorctl" --run-dir "$run" clear --tier disk); rc=$?
check "clear --tier disk: exit 0, says so" '[ $rc -eq 0 ] && [ "$out" = "cleared disk" ]'
h1=$(held)
check "clear --tier disk emptied the disk tier: $h1" '[ "$(echo "$h1" | part disk)" = "{\"anchors\": 0, \"bytes\": 0, \"chunks\": 0, \"lines\": []}" ]'
check "clear --tier disk left the spill" 'left spill "$h1" "$h0"'
check "clear --tier disk left RAM" 'left ram "$h1" "$h0"'

# a new session's first long request writes its head anchors again
turn c1.out "$(seq -s, 6000 6699)" sC
turn c2.out "$(seq -s, 6000 6699),$(seq -s, 7000 7009)" sC
wait_disk || check "the disk tier wrote nothing after its clear" false
h2=$(held)
out=$("$moorctl" --run-dir "$run" clear --tier spill); rc=$?
check "clear --tier spill: exit 0, says so" '[ $rc -eq 0 ] && [ "$out" = "cleared spill" ]'
h3=$(held)
check "clear --tier spill emptied the spill: $h3" '[ "$(echo "$h3" | part spill)" = "{\"bytes\": 0, \"entries\": 0}" ]'
check "clear --tier spill left the disk tier" 'left disk "$h3" "$h2"'
check "clear --tier spill left RAM" 'left ram "$h3" "$h2"'

# the spill holds a conversation again after another drain
stop "$cpid"; cpid=
check "cached2 stopped with $st after SIGTERM, want 0" '[ "$st" = 0 ]'
start_cached cached3.log
wait_log "$run/cached3.log" '\[spill\] read back' 400 ||
	check "cached3 read nothing back" false
h4=$(held)
check "after the second restart every tier holds something: $h4" 'full "$h4"'
out=$("$moorctl" --run-dir "$run" clear --tier ram); rc=$?
h5=$(held)
check "clear --tier ram: exit 0" '[ $rc -eq 0 ] && [ "$out" = "cleared ram" ]'
check "clear --tier ram emptied the resident prefix and the end anchor: $h5" '[ "$(echo "$h5" | json "d[\"ram\"][\"resident\"][\"anchors\"] == 0 and d[\"ram\"][\"resident\"][\"bytes\"] == 0 and d[\"ram\"][\"end\"][\"have\"] is False")" = True ]'
check "clear --tier ram left the NVMe tiers" 'left disk "$h5" "$h4" && left spill "$h5" "$h4"'
# RAM again, so that "all" has every tier to empty
turn d1.out "$(seq -s, 8000 8199)" sD
wait_disk || check "the disk tier's writer did not settle" false
h6=$(held)
check "before clear --tier all every tier holds something: $h6" 'full "$h6"'
out=$("$moorctl" --run-dir "$run" clear --tier all); rc=$?
h7=$(held)
check "clear --tier all: exit 0" '[ $rc -eq 0 ] && [ "$out" = "cleared all" ]'
check "clear --tier all emptied every tier: before $h6, after $h7" '[ "$(echo "$h7" | json "d[\"disk\"] == {\"anchors\": 0, \"bytes\": 0, \"chunks\": 0, \"lines\": []} and d[\"spill\"] == {\"bytes\": 0, \"entries\": 0} and d[\"ram\"][\"resident\"][\"anchors\"] == 0 and d[\"ram\"][\"resident\"][\"bytes\"] == 0 and d[\"ram\"][\"end\"][\"have\"] is False and d[\"ram\"][\"park\"][\"tokens\"] == 0 and d[\"ram\"][\"pin\"][\"tokens\"] == 0 and d[\"ram\"][\"store\"][\"entries\"] == 0")" = True ]'

[ $fail -eq 0 ] && echo "test_moorctl_nvme: ok"
exit $fail
