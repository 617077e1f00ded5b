#!/usr/bin/env bash
# test_deploy_run: the README's run command, end to end, as a user runs it.
#
# deploy/run (--no-setup, this build's daemons through MOOR_BUILD) on a free
# port and a temp run dir prints its address once /health is green; a text
# completion is answered and a longer prompt that starts with it resumes
# from the cache (cached_tokens > 0). engined killed -9 is started again by
# the supervisor, cached hands it the state the dead one left, and the next
# turn still resumes from RAM. A second deploy/run on the same port fails at
# start with exit 1 and a message saying the port is taken, leaving none of
# its daemons behind. Ctrl-C (SIGINT to the script alone, as a terminal sends it
# to the foreground group) stops gatewayd, engined and cached in that order
# and exits 0: no daemon is left, cached's shm arenas are unlinked. An
# unknown flag is exit 1 with the usage. Every wait is bounded.
#
#   test_deploy_run.sh SOURCE_ROOT BUILD_ROOT MODEL_DIR
set -u
src=$1 build=$2 model=$3
tmp=$(mktemp -d /tmp/moor-deployrun-XXXXXX)
fail=0
rp=
cleanup() {
	[ -n "$rp" ] && kill -TERM "$rp" 2>/dev/null && sleep 2
	# any daemon of ours still up: the pids deploy/run said it started
	# (both runs' logs), each still running with our run dir in its argv
	# (not a later process that took a dead daemon's pid)
	local pids='' p
	for p in $(sed -n 's/.*started [a-z]* (pid \([0-9]*\)).*/\1/p' "$tmp"/run*.log 2>/dev/null); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$tmp/" && pids="$pids $p"
	done
	if [ -n "$pids" ]; then
		kill -TERM $pids 2>/dev/null && sleep 1
		kill -KILL $pids 2>/dev/null
	fi
	if [ $fail -ne 0 ]; then
		for f in "$tmp"/*.log; do echo "---- $f"; cat "$f"; done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/../shlib.sh"
# polls until file $1 matches regex $2, up to $3 seconds
wait_log() {
	local end=$((SECONDS + $3))
	while [ $SECONDS -lt $end ]; do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
# a text completion of token ids 1000..1000+n-1; prints its JSON
complete() { # n
	local ids
	ids=$(seq -s, 1000 $((999 + $1)))
	curl -s -m 60 "$base/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"prompt\":[${ids}],\"max_tokens\":3,\"temperature\":0}"
}

port=$(free_port)
base=http://127.0.0.1:$port
run=$tmp/run
flags=(--no-setup --model "$model" --port "$port" --threads 2 --grid 64 --window 4096
	--disk-dir "$tmp/disk")

# ---- bad flag ----
MOOR_BUILD=$build "$src/deploy/run" --bogus >"$tmp/bad.log" 2>&1
st=$?
check "an unknown flag: exit $st, want 1" '[ $st -eq 1 ]'
check "an unknown flag is not named with the usage" \
	'grep -q "unknown flag .--bogus" "$tmp/bad.log" && grep -q "^usage:" "$tmp/bad.log"'

# ---- up ----
set -m # background jobs in groups of their own, with SIGINT not ignored
MOOR_BUILD=$build "$src/deploy/run" "${flags[@]}" --run-dir "$run" >"$tmp/run.log" 2>&1 &
rp=$!
set +m
require "deploy/run did not print its address" \
	"wait_log '$tmp/run.log' 'serving tiny at http://127.0.0.1:$port/v1' 60"
h=$(curl -s -m 5 "$base/health")
check "health: $h" '[ "$(echo "$h" | json "d[\"status\"], d[\"processes\"][\"engined\"], d[\"processes\"][\"cached\"]")" = "ok up up" ]'

# ---- a turn, then one that resumes ----
r1=$(complete 100)
check "first completion: $r1" '[ "$(echo "$r1" | json "d[\"usage\"][\"completion_tokens\"]")" = 3 ]'
r2=$(complete 150)
c2=$(echo "$r2" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
check "second completion did not resume: $r2" '[ "${c2:-0}" -ge 64 ]'

# ---- engined dies: started again, the caches stay ----
ep=$(sed -n 's/.*started engined (pid \([0-9]*\)).*/\1/p' "$tmp/run.log" | tail -1)
require "no engined pid in the log" '[ -n "$ep" ]'
kill -9 "$ep"
check "the supervisor did not say engined died" \
	"wait_log '$tmp/run.log' 'engined exited \\(status 137\\): starting it again' 15"
ep2=$(sed -n 's/.*started engined (pid \([0-9]*\)).*/\1/p' "$tmp/run.log" | tail -1)
check "engined was not started again ($ep, $ep2)" '[ -n "$ep2" ] && [ "$ep2" != "$ep" ]'
check "health not green after the restart" 'wait_green "$base" 30'
check "cached did not hand the new engined its state" \
	"grep -q 'handed back the state' '$tmp/run.log'"
r3=$(complete 200)
c3=$(echo "$r3" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]' 2>/dev/null)
check "after the restart the turn did not resume from RAM: $r3" '[ "${c3:-0}" -ge "${c2:-1}" ]'
echo "resumed: ${c2:-?} cached tokens before engined's restart, ${c3:-?} after"

# ---- a second deploy/run on the same port: fails, leaves nothing ----
MOOR_BUILD=$build timeout 60 "$src/deploy/run" "${flags[@]}" --run-dir "$tmp/run2" \
	>"$tmp/run2.log" 2>&1
st=$?
check "a second run on a taken port: exit $st, want 1" '[ $st -eq 1 ]'
check "the second run does not say the port is taken" \
	"grep -q '127.0.0.1:$port is taken by another process' '$tmp/run2.log'"
check "the second run left daemons behind" '! pgrep -f "$tmp/run2" >/dev/null'
check "the first run was disturbed" 'wait_green "$base" 5'

# ---- Ctrl-C ----
arenas=$(grep -o 'arena /[^ ]*' "$tmp/run.log" | sed 's/arena //' | sort -u)
kill -INT "$rp"
end=$((SECONDS + 40))
while kill -0 "$rp" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
wait "$rp"
st=$?
rp=
check "after Ctrl-C deploy/run exited with $st, want 0" '[ $st -eq 0 ]'
check "the stop was not in order" \
	"grep -n 'stopped' '$tmp/run.log' | grep -E 'gatewayd|engined|cached|deploy/run' | cut -d: -f2 | paste -sd, | grep -qx 'gatewayd,engined,cached,deploy/run'"
check "daemons left after Ctrl-C" '! pgrep -f "$run" >/dev/null'
for a in $arenas; do
	check "arena $a left in /dev/shm" "[ ! -e /dev/shm$a ]"
done

[ $fail -eq 0 ] && echo "test_deploy_run: ok"
exit $fail
