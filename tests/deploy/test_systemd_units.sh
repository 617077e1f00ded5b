#!/usr/bin/env bash
# test_systemd_units: the units in deploy/systemd are valid and their
# command lines serve.
#
# 1. `systemd-analyze verify` of the target and the three services (their
#    /usr/local/bin paths pointed at this build) prints nothing and exits 0:
#    every directive parses, every ExecStart is an executable.
# 1b. Each service is hardened: the directives below with these values
#    (no privileges, a read-only system but for the run and state dirs, a
#    private /tmp, kernel knobs protected, unix sockets only for cached and
#    engined), and systemd-analyze security --offline rates its exposure
#    at most 4.0 (the units before hardening: 9.2, "UNSAFE"); gatewayd's
#    descriptor limit fits --max-conns, its memory is capped (MemoryMax,
#    twice its stated RSS bound) and the OOM killer takes it first,
#    cached last (OOMScoreAdjust).
#    Without systemd-analyze, 1 (and the rating) is skipped with a line.
# 1c. The stop: its order lets cached drain after engined stopped writing
#    into its arenas (engined After=moor-cached, gatewayd After= both, each
#    PartOf=moor.target: systemd stops in the reverse order, gatewayd,
#    engined, cached), and each daemon's time to stop holds its own stop:
#    cached's TimeoutStopSec >= serve.env's MOOR_DRAIN_S + 15 (systemd
#    cannot read the file for it), gatewayd's >= its stop grace
#    (GW_STOP_GRACE_S in gatewayd/main.c) + 5, engined's >= 10 (the
#    prefill under way and 2 s for its clients' last messages); deploy/run
#    gives gatewayd and engined the units' times, and kills cached
#    MOOR_DRAIN_S after its SIGTERM: with MOOR_DRAIN_S=2 and a stand-in
#    cached that ignores SIGTERM (this build's daemons are not used there),
#    deploy/run says it killed cached after 2 s and exits 0 within 1 to 5 s
#    (its clock is bash's whole SECONDS).
# 2. Each service's ExecStart is expanded as systemd expands it (${VAR} one
#    word, $VAR split on spaces, an empty $VAR no word) with deploy/serve.env's
#    values, the model, port and sizes overridden for the test and
#    /run/moor a temp dir, and the three are started in the units' order:
#    /health turns green and a chat is answered, so every flag the units pass
#    is one the daemons take. SIGTERM (the units' KillSignal) stops each one
#    with status 0.
#
#   test_systemd_units.sh SOURCE_ROOT BUILD_ROOT MODEL_DIR
set -u
src=$1 build=$2 model=$3
units=$src/deploy/systemd
tmp=$(mktemp -d /tmp/moor-units-XXXXXX)
fail=0
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 1
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	if [ $fail -ne 0 ]; then
		for f in "$tmp"/*.log; do echo "---- $f"; cat "$f"; done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/../shlib.sh"

declare -A bin=([cached]=$build/cached/cached [engined]=$build/engined/engined
	[gatewayd]=$build/gatewayd/gatewayd)

# ---- 1. verify ----
mkdir "$tmp/units"
cp "$units/moor.target" "$tmp/units/"
for d in cached engined gatewayd; do
	sed "s#/usr/local/bin/$d#${bin[$d]}#" "$units/moor-$d.service" >"$tmp/units/moor-$d.service"
done
have_sa=1
command -v systemd-analyze >/dev/null 2>&1 || have_sa=0
if [ $have_sa -eq 1 ]; then
	out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no \
		./moor.target ./moor-cached.service ./moor-engined.service ./moor-gatewayd.service 2>&1)
	st=$?
	check "systemd-analyze verify: exit $st: $out" '[ $st -eq 0 ] && [ -z "$out" ]'
else
	echo "skip: systemd-analyze is not installed: the units are not verified, nor their exposure rated (the directives and command lines are still checked)"
fi

# ---- 1b. hardening ----
want_all=(NoNewPrivileges=yes CapabilityBoundingSet= AmbientCapabilities=
	RestrictSUIDSGID=yes RestrictNamespaces=yes RestrictRealtime=yes
	LockPersonality=yes SystemCallArchitectures=native ProtectSystem=strict
	ProtectHome=yes PrivateTmp=yes StateDirectory=moor UMask=0077
	ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes
	ProtectControlGroups=yes ProtectClock=yes ProtectHostname=yes
	ProtectProc=invisible)
declare -A want_one=([cached]="RestrictAddressFamilies=AF_UNIX|OOMScoreAdjust=-500"
	[engined]="RestrictAddressFamilies=AF_UNIX"
	[gatewayd]="RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6|PrivateDevices=yes|SystemCallFilter=@system-service|LimitNOFILE=16384|MemoryMax=2G|OOMScoreAdjust=500")
for d in cached engined gatewayd; do
	f=$tmp/units/moor-$d.service
	IFS='|' read -r -a extra <<<"${want_one[$d]}"
	for kv in "${want_all[@]}" "${extra[@]}"; do
		check "moor-$d.service lacks '$kv'" 'grep -qxF "$kv" "$f"'
	done
	# a device namespace of its own would give cached and engined two
	# /dev/shm: the arenas must be one
	if [ $d != gatewayd ]; then
		check "moor-$d.service has PrivateDevices or PrivateIPC (the arenas are shared shm)" \
			'! grep -Eq "^(PrivateDevices|PrivateIPC)=yes" "$f"'
	fi
	if [ $have_sa -eq 1 ] && sec=$(cd "$tmp/units" && systemd-analyze security --offline=true "./moor-$d.service" 2>/dev/null); then
		lvl=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
		echo "moor-$d.service: exposure $lvl"
		check "moor-$d.service: exposure '$lvl' over 4.0" \
			'[ -n "$lvl" ] && awk -v l="$lvl" "BEGIN { exit !(l <= 4.0) }"'
	else
		echo "systemd-analyze security --offline is not available: the exposure is not rated"
	fi
done

# ---- 1c. the stop: order and time ----
unit_val() { # daemon key: the last key= of its unit
	sed -n "s/^$2=//p" "$units/moor-$1.service" | tail -1
}
declare -A stop_s=()
for d in cached engined gatewayd; do
	stop_s[$d]=$(unit_val $d TimeoutStopSec)
	check "moor-$d.service: TimeoutStopSec '${stop_s[$d]}' is not whole seconds" \
		'[[ ${stop_s[$d]} =~ ^[0-9]+$ ]]'
	check "moor-$d.service is not PartOf=moor.target" '[ "$(unit_val $d PartOf)" = moor.target ]'
done
after_e=" $(unit_val engined After) " after_g=" $(unit_val gatewayd After) "
after_c=" $(unit_val cached After) "
check "moor-engined.service is not After=moor-cached.service (cached would stop first)" \
	'[[ $after_e == *" moor-cached.service "* ]]'
check "moor-gatewayd.service is not After= cached and engined (it would not stop first)" \
	'[[ $after_g == *" moor-cached.service "* && $after_g == *" moor-engined.service "* ]]'
check "moor-cached.service is After= engined or gatewayd (it would stop before them)" \
	'[[ $after_c != *moor-engined* && $after_c != *moor-gatewayd* ]]'
drain=$(sed -n 's/^MOOR_DRAIN_S=//p' "$src/deploy/serve.env")
check "serve.env: MOOR_DRAIN_S '$drain' is not whole seconds" '[[ $drain =~ ^[0-9]+$ ]]'
check "moor-cached.service: TimeoutStopSec ${stop_s[cached]} under MOOR_DRAIN_S $drain + 15" \
	'[[ ${stop_s[cached]} =~ ^[0-9]+$ && $drain =~ ^[0-9]+$ ]] && [ "${stop_s[cached]}" -ge $((drain + 15)) ]'
grace=$(sed -n 's/^#define GW_STOP_GRACE_S \([0-9.]*\).*/\1/p' "$src/gatewayd/main.c")
check "moor-gatewayd.service: TimeoutStopSec ${stop_s[gatewayd]} under its stop grace '$grace' s + 5" \
	'[ -n "$grace" ] && awk -v t="${stop_s[gatewayd]:-0}" -v g="$grace" "BEGIN { exit !(t >= g + 5) }"'
check "moor-engined.service: TimeoutStopSec ${stop_s[engined]} under 10" \
	'[[ ${stop_s[engined]} =~ ^[0-9]+$ ]] && [ "${stop_s[engined]}" -ge 10 ]'
for d in engined gatewayd; do
	v=$(sed -n "s/^stop_s_$d=//p" "$src/deploy/run")
	check "deploy/run gives $d '$v' s to stop, its unit ${stop_s[$d]}" '[ "$v" = "${stop_s[$d]}" ]'
done
# deploy/run's deadline for cached, with stand-ins for the daemons: cached
# opens its admin socket and ignores SIGTERM, the others sleep (each keeps
# its argv, the temp run dir in it, for the cleanup below)
fake=$tmp/fake
mkdir -p "$fake/cached" "$fake/engined" "$fake/gatewayd"
printf '%s\n' '#!/usr/bin/env python3' 'import signal, socket, sys, time' \
	'signal.signal(signal.SIGTERM, signal.SIG_IGN)' \
	'run = sys.argv[sys.argv.index("--run-dir") + 1]' \
	's = socket.socket(socket.AF_UNIX)' 's.bind(run + "/admin.sock")' \
	'time.sleep(120)' >"$fake/cached/cached"
for d in engined gatewayd; do
	printf '%s\n' '#!/usr/bin/env python3' 'import time' 'time.sleep(120)' >"$fake/$d/$d"
done
chmod +x "$fake/cached/cached" "$fake/engined/engined" "$fake/gatewayd/gatewayd"
MOOR_BUILD=$fake MOOR_DRAIN_S=2 "$src/deploy/run" --no-setup --model "$model" \
	--port "$(free_port)" --run-dir "$tmp/run-fake" --disk-dir "" >"$tmp/run-fake.log" 2>&1 &
rp=$!
pids+=($rp)
for _ in $(seq 100); do
	grep -q "started gatewayd" "$tmp/run-fake.log" 2>/dev/null && break
	sleep 0.1
done
# the stand-ins too, for the cleanup (cached's ignores SIGTERM: -KILL)
for p in $(sed -n 's/.*started [a-z]* (pid \([0-9]*\)).*/\1/p' "$tmp/run-fake.log"); do
	pids+=($p)
done
require "deploy/run did not start the stand-ins" 'grep -q "started gatewayd" "$tmp/run-fake.log"'
t0=$(date +%s.%N)
kill -TERM "$rp"
for _ in $(seq 200); do
	kill -0 "$rp" 2>/dev/null || break
	sleep 0.05
done
t1=$(date +%s.%N)
wait "$rp"
st=$?
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "deploy/run, MOOR_DRAIN_S=2, a cached that ignores SIGTERM: stopped in $took s"
# (deploy/run counts in bash's whole SECONDS: its 2 s are 1 to 2)
check "deploy/run with MOOR_DRAIN_S=2 exited $st after $took s, want 0 within 1 to 5 s" \
	'[ $st -eq 0 ] && awk -v t="$took" "BEGIN { exit !(t >= 1 && t < 5) }"'
check "deploy/run did not say it killed cached after MOOR_DRAIN_S" \
	'grep -q "cached did not stop in 2 s: killed" "$tmp/run-fake.log"'
for p in "${pids[@]}"; do # a stand-in left (none, when deploy/run did its part)
	tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF "$tmp/" && kill -KILL "$p"
done
pids=()

# ---- 2. the command lines ----
declare -A env=()
while IFS= read -r line; do
	[[ $line =~ ^([A-Z_][A-Z0-9_]*)=(.*)$ ]] && env[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done <"$src/deploy/serve.env"
port=$(free_port)
env[MOOR_MODEL]=$model
env[MOOR_LISTEN]=127.0.0.1:$port
env[MOOR_GRID]=64
env[MOOR_WINDOW]=4096
# the NVMe tiers in the temp dir (serve.env's is relative to the units'
# WorkingDirectory: here it would land in the build dir), no free-space floor
env[MOOR_DISK_DIR]=$tmp/disk
env[MOOR_CACHED_ARGS]="--device-gb 0.25 --host-gb 0.25 --mem-ceiling-gb 0.25 --mem-peak-gb 0.25 --cache-gb 0.05 --disk-cache-min-free-gb 0"
env[MOOR_ENGINED_ARGS]="--threads 2"
run=$tmp/run
mkdir -m 700 "$run"

# prints the expanded ExecStart of a unit, one word a line
expand() { # unit
	local line w name
	line=$(sed -n 's/^ExecStart=//p' "$1")
	for w in $line; do
		if [[ $w =~ ^\$([A-Z_][A-Z0-9_]*)$ ]]; then
			for x in ${env[${BASH_REMATCH[1]}]:-}; do printf '%s\n' "$x"; done
			continue
		fi
		while [[ $w =~ \$\{([A-Z_][A-Z0-9_]*)\} ]]; do
			name=${BASH_REMATCH[1]}
			w=${w//"\${$name}"/${env[$name]:-}}
		done
		w=${w//\/run\/moor/$run}
		printf '%s\n' "$w"
	done
}

for d in cached engined gatewayd; do
	mapfile -t argv < <(expand "$tmp/units/moor-$d.service")
	require "moor-$d.service: no ExecStart" '[ ${#argv[@]} -gt 0 ]'
	echo "moor-$d.service: ${argv[*]}"
	"${argv[@]}" >"$tmp/$d.log" 2>&1 &
	pids+=($!)
	if [ $d = cached ]; then
		for _ in $(seq 200); do [ -S "$run/admin.sock" ] && break; sleep 0.05; done
		require "cached did not open its socket" '[ -S "$run/admin.sock" ]'
	fi
done
base=http://127.0.0.1:$port
require "the units' stack did not turn green" 'wait_green "$base" 30'
r=$(curl -s -m 30 "$base/v1/chat/completions" -H 'Content-Type: application/json' \
	-d '{"messages":[{"role":"user","content":"hello"}],"max_tokens":3,"temperature":0}')
check "a chat through the units' stack: $r" '[[ $r == *"\"completion_tokens\":3"* ]]'

# SIGTERM, as systemctl stop sends it: each exits 0, gatewayd first
for i in 2 1 0; do
	p=${pids[$i]}
	kill -TERM "$p"
	wait "$p"
	st=$?
	check "SIGTERM: pid $p exited $st" '[ $st -eq 0 ]'
done
pids=()

[ $fail -eq 0 ] && echo "test_systemd_units: ok"
exit $fail
