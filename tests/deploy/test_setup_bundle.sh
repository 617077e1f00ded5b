#!/usr/bin/env bash
# test_setup_bundle: an offline host, as deploy/setup --bundle and --from
# promise it.
#
# deploy/setup --bundle writes a bundle here (the .debs of the C libraries,
# the tiny model's tokenizer, a MANIFEST with every sha256). --from then
# installs it into a fresh copy of this tree with no package manager at all:
# apt-get, apt, dpkg-query, npm, node and sudo on PATH are traps that fail
# and log, LD_LIBRARY_PATH is unset and pkg-config's own search path points
# nowhere. It must verify, unpack into .deps/, build the whole tree against
# it (every header and library the build used from .deps/, every binary
# carrying an RPATH there), write models/tiny with the same bytes as here,
# and engined must answer the same ids as this build's. A second --from and
# a plain deploy/setup there rebuild nothing and touch no package manager.
# The oracle tests skip there (exit 77, saying why) once env.sh is sourced,
# and fail without it. A bundle with one byte changed in a .deb, or with a
# .deb missing, fails --from with a message naming the file, before
# anything is unpacked. The python3 unpacker (hosts without dpkg-deb) gives
# the same files as dpkg-deb.
#
#   test_setup_bundle.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1 build=$2
fail=0
. "$(dirname "$0")/../shlib.sh"
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	echo "skip: deploy/setup --bundle needs apt-get and dpkg-deb (a Debian host)"
	exit 77
fi
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || {
	echo "skip: $src is not a git checkout (the copy of the tree is made from git ls-files)"
	exit 77
}
tmp=$(mktemp -d /tmp/moor-bundle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS

# ---- the bundle --------------------------------------------------------------
require "--bundle succeeds" '"$src/deploy/setup" --bundle "$tmp/bundle" >"$tmp/bundle.log" 2>&1 || { cat "$tmp/bundle.log"; false; }'
b=$tmp/bundle
check "MANIFEST names its format" '[ "$(head -n1 "$b/MANIFEST")" = "moor-bundle 1" ]'
for p in libh2o-dev libh2o0.13 libwslay1 libuv1-dev libnng-dev libnng1 libmbedtls14 \
	libssl-dev libssl3 libjansson-dev libpcre2-dev libutf8proc-dev libxxhash-dev \
	libzstd-dev liblmdb-dev libcmocka-dev pkgconf-bin libpkgconf3; do
	check "the bundle holds $p" 'grep -q "^deb [0-9a-f]\{64\} [0-9]* debs/[^ ]* $p " "$b/MANIFEST"'
done
check "the bundle holds the tokenizer" 'grep -q " tokenizer/tokenizer.json.xz$" "$b/MANIFEST" && grep -q " tokenizer/tokenizer_config.json.xz$" "$b/MANIFEST"'
check "every MANIFEST line's file is there" '[ "$(grep -c "^\(deb\|file\) " "$b/MANIFEST")" = "$(find "$b/debs" "$b/tokenizer" -type f | wc -l)" ]'
kb=$(du -sk "$b" | cut -f1)
echo "bundle: $(grep -c '^deb ' "$b/MANIFEST") packages, $((kb / 1024)) MiB ($kb KiB)"
check "the bundle stays small (< 12 MiB, $kb KiB)" '[ "$kb" -lt 12288 ]'

# ---- a fresh copy of the tree, no package manager --------------------------
co=$tmp/co/moor
mkdir -p "$co"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf -) | tar xf - -C "$co"
[ -d "$src/../shared" ] && ln -s "$(cd "$src/../shared" && pwd)" "$tmp/co/shared"
mkdir -p "$tmp/trap"
for c in apt-get apt apt-cache dpkg-query npm npx node sudo; do
	printf '#!/bin/sh\necho "%s $*" >>"%s/trap.log"\nexit 97\n' "$c" "$tmp" >"$tmp/trap/$c"
	chmod +x "$tmp/trap/$c"
done
offline() { # runs "$@" in the copy as the offline host would
	(cd "$co" && env -u LD_LIBRARY_PATH -u MOOR_DEPS_PREFIX -u MOOR_NO_ORACLES \
		PATH="$tmp/trap:$PATH" PKG_CONFIG_LIBDIR="$tmp/nothing" PKG_CONFIG_PATH= \
		CPATH= LIBRARY_PATH= MOOR_JOBS="${MOOR_JOBS:-2}" "$@")
}

require "--from succeeds" 'offline deploy/setup --from "$b" >"$tmp/from.log" 2>&1 || { cat "$tmp/from.log"; grep -i -B2 -A6 "pkg-config\|pkgconf" "$co/build/meson-logs/meson-log.txt" | head -60 2>/dev/null; false; }'
echo "--from (verify, unpack, meson setup, full build, tiny model): $((SECONDS - t0)) s since the start"
check "--from called no package manager ($(cat "$tmp/trap.log" 2>/dev/null))" '[ ! -s "$tmp/trap.log" ]'
check "--from says every file matches" 'grep -q "every file matches its MANIFEST" "$tmp/from.log"'
check "--from says how to source the env" 'grep -q "\. $co/.deps/env.sh" "$tmp/from.log"'
check "env.sh exports the build variables" 'grep -q "^export PKG_CONFIG=" "$co/.deps/env.sh" && grep -q "^export CPATH=" "$co/.deps/env.sh" && grep -q "^export MOOR_NO_ORACLES=1" "$co/.deps/env.sh"'
check ".deps is git-ignored" '(cd "$src" && git check-ignore -q .deps/)'
if [ -f "$src/models/tiny/model.safetensors" ]; then
	check "models/tiny has the same bytes as here" 'cmp -s "$co/models/tiny/model.safetensors" "$src/models/tiny/model.safetensors" && cmp -s "$co/models/tiny/tokenizer.json" "$src/models/tiny/tokenizer.json"'
fi

# The build used the prefix, not this machine's /usr.
check "meson used the prefix's pkg-config" 'grep -q "Found pkg-config: $co/.deps/bin/pkg-config" "$co/build/meson-logs/meson-log.txt"'
gw=$co/build/gatewayd/gatewayd
check "gatewayd carries an RPATH into .deps" 'readelf -d "$gw" | grep -q "(RPATH).*$co/.deps/usr/lib"'
env -u LD_LIBRARY_PATH ldd "$gw" >"$tmp/ldd.txt" 2>&1
for l in libh2o.so libwslay.so libuv.so libssl.so libnng.so libmbedtls.so libjansson.so libpcre2-8.so libutf8proc.so libxxhash.so; do
	check "gatewayd loads $l from .deps" 'grep -q "$l[^ ]* => $co/.deps/" "$tmp/ldd.txt"'
done
check "no library is missing at load" '! grep -q "not found" "$tmp/ldd.txt"'
grep "LINK_ARGS = " "$co/build/build.ninja" | tr " " "\n" | sort -u >"$tmp/link.txt"
check "no library linked from this machine's /usr ($(grep "^/usr/.*\.so" "$tmp/link.txt" | head -n3))" '! grep -q "^/usr/.*\.so" "$tmp/link.txt"'
check "the prefix's libraries linked by path or -L" 'grep -q "^$co/.deps/usr/lib/.*/libh2o\.so$" "$tmp/link.txt" && grep -q "^-L$co/.deps/usr/lib/" "$tmp/link.txt"'
(cd "$co" && ninja -C build -t deps) >"$tmp/deps.txt" 2>/dev/null
for h in h2o.h uv.h nng/nng.h jansson.h pcre2.h utf8proc.h xxhash.h openssl/ssl.h; do
	check "the build read $h from .deps" 'grep -q "^ *$co/.deps/usr/include/$h$" "$tmp/deps.txt" && ! grep -q "^ */usr/include/$h$" "$tmp/deps.txt"'
done

# One quick binary, as this build answers.
ids=$(offline build/engined/engined --model models/tiny --prompt-ids 9707,11 --max-tokens 2 --threads 2 2>/dev/null)
check "engined of the offline build prints 2 ids ('$ids')" '[[ $ids =~ ^[0-9]+\ [0-9]+$ ]]'
if [ -x "$build/engined/engined" ] && [ -f "$src/models/tiny/model.safetensors" ]; then
	want=$("$build/engined/engined" --model "$src/models/tiny" --prompt-ids 9707,11 --max-tokens 2 --threads 2 2>/dev/null)
	check "the same ids as this build's ('$ids' vs '$want')" '[ "$ids" = "$want" ]'
fi

# ---- idempotent ------------------------------------------------------------------
require "a second --from succeeds" 'offline deploy/setup --from "$b" >"$tmp/from2.log" 2>&1 || { cat "$tmp/from2.log"; false; }'
check "the second --from unpacks nothing" 'grep -q "are the bundle.s" "$tmp/from2.log" && ! grep -q unpacking "$tmp/from2.log"'
require "a plain deploy/setup in the offline tree succeeds" 'offline deploy/setup >"$tmp/plain.log" 2>&1 || { cat "$tmp/plain.log"; false; }'
# (engined's fingerprint hashes its sources at every build, fp_build.c,
# rewritten only when they change: that step alone may run)
check "then ninja rebuilds nothing" '(cd "$co" && ninja -C build) >"$tmp/ninja2.log" && ! grep -E "^\[[0-9]+/[0-9]+\]" "$tmp/ninja2.log" | grep -qv "engined/fp_build\.c"'
check "still no package manager called ($(cat "$tmp/trap.log" 2>/dev/null))" '[ ! -s "$tmp/trap.log" ]'

# ---- the oracle tests skip there, saying why, only when told -------------------
t=build/tests/tokenizer/test_tok_ids_equal_hf
if [ -x "$co/$t" ]; then
	out=$(offline bash -c ". .deps/env.sh && MOOR_SRC=$co $t" 2>&1)
	rc=$?
	check "an oracle test skips with env.sh (rc $rc: $out)" '[ $rc = 77 ] && [[ $out == *"skip (MOOR_NO_ORACLES=1"*"oracles are missing"* ]]'
	offline env MOOR_SRC="$co" "$t" >/dev/null 2>&1
	rc=$?
	check "and fails without it (rc $rc)" '[ $rc = 1 ]'
fi

# ---- a damaged bundle ------------------------------------------------------------
cp -r "$b" "$tmp/bad"
deb=$(cd "$tmp/bad/debs" && ls libuv1_*.deb | head -n1)
size=$(stat -c %s "$tmp/bad/debs/$deb")
printf '\x5a' | dd of="$tmp/bad/debs/$deb" bs=1 seek=$((size / 2)) conv=notrunc status=none
offline env MOOR_DEPS_PREFIX="$tmp/pfx-bad" deploy/setup --from "$tmp/bad" >"$tmp/bad.log" 2>&1
rc=$?
check "a changed byte fails --from (rc $rc)" '[ $rc != 0 ]'
check "naming the file ($(tail -n1 "$tmp/bad.log"))" 'grep -q "debs/$deb: sha256 differs" "$tmp/bad.log"'
check "before anything is unpacked" '[ ! -e "$tmp/pfx-bad" ]'
cp "$b/debs/$deb" "$tmp/bad/debs/$deb"
rm "$tmp/bad/debs/"libssl3_*.deb
offline env MOOR_DEPS_PREFIX="$tmp/pfx-bad" deploy/setup --from "$tmp/bad" >"$tmp/bad2.log" 2>&1
rc=$?
check "a missing .deb fails --from naming it (rc $rc: $(tail -n1 "$tmp/bad2.log"))" '[ $rc != 0 ] && grep -q "debs/libssl3_.*missing" "$tmp/bad2.log"'

# ---- the python3 unpacker, for hosts without dpkg-deb --------------------------
if command -v python3 >/dev/null; then
	(
		source <(sed -n '/^unpack_deb()/,/^}/p' "$src/deploy/setup")
		for f in "$b"/debs/*.deb; do MOOR_UNPACK=python unpack_deb "$f" "$tmp/py" || exit 1; done
	)
	pyrc=$?
	check "python3 unpacks every .deb (rc $pyrc)" '[ $pyrc = 0 ]'
	list() { (cd "$1" && find usr \( -type f -o -type l \) -printf '%p %y %l %s\n' | sort); }
	check "into the same files as dpkg-deb" '[ "$(list "$tmp/py")" = "$(list "$co/.deps")" ]'
fi

echo "test_setup_bundle: $((SECONDS - t0)) s"
[ $fail = 0 ] && echo "test_setup_bundle: ok"
exit $fail
