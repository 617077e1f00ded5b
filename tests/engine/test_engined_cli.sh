#!/usr/bin/env bash
# test_engined_cli: the one-shot engined prints the same ids twice (greedy
# and seeded sampling), stops at max-tokens, and fails with one clear message
# and a non-zero exit on bad input.
set -u
engined=$1 tiny=$2 golden=$3
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }

a=$("$engined" --model "$tiny" --prompt-ids 9707,11,1879,0 --max-tokens 6 --ignore-eos 2>/dev/null)
b=$("$engined" --model "$tiny" --prompt-ids 9707,11,1879,0 --max-tokens 6 --ignore-eos --threads 2 2>/dev/null)
check "greedy ids printed" '[ "$(echo "$a" | wc -w)" -eq 6 ]'
check "greedy reproducible across thread counts" '[ "$a" = "$b" ]'
s1=$("$engined" --model "$tiny" --prompt-ids 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.95 --top-k 50 --seed 42 --ignore-eos 2>/dev/null)
s2=$("$engined" --model "$tiny" --prompt-ids 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.95 --top-k 50 --seed 42 --ignore-eos 2>/dev/null)
check "seeded sampling reproducible" '[ -n "$s1" ] && [ "$s1" = "$s2" ]'

err=$("$engined" --model /nonexistent/model --prompt-ids 1 2>&1 >/dev/null); rc=$?
check "missing model: non-zero exit" '[ $rc -ne 0 ]'
check "missing model: names the path" 'echo "$err" | grep -q "/nonexistent/model"'
err=$("$engined" --model "$golden/f32_untied" --prompt-ids 1,99999 2>&1 >/dev/null); rc=$?
check "id outside vocab: refused" '[ $rc -ne 0 ] && echo "$err" | grep -q "outside the vocabulary"'
err=$("$engined" --model "$tiny" --prompt-ids abc 2>&1 >/dev/null); rc=$?
check "malformed ids: refused" '[ $rc -eq 2 ]'
err=$("$engined" --model "$tiny" --prompt-ids 1 --grid 100 2>&1 >/dev/null); rc=$?
check "grid not a multiple of 64: refused" '[ $rc -ne 0 ] && echo "$err" | grep -q "multiple of 64"'
# --max-num-batched-tokens: forwards of 3 chunks give a chunk a
# forward's ids (300 ids on a grid of 64: [0, 192), [192, 256), the tail);
# a value that is not a multiple of the grid is refused at load, one that
# is no number at once
ids=$(seq -s, 100 399)
p1=$("$engined" --model "$tiny" --prompt-ids "$ids" --max-tokens 4 --ignore-eos --grid 64 2>/dev/null)
p2=$("$engined" --model "$tiny" --prompt-ids "$ids" --max-tokens 4 --ignore-eos --grid 64 --max-num-batched-tokens 192 2>/dev/null)
check "--max-num-batched-tokens 192: ids '$p2', a chunk a forward '$p1'" '[ "$(echo "$p1" | wc -w)" -eq 4 ] && [ "$p1" = "$p2" ]'
err=$("$engined" --model "$tiny" --prompt-ids 1 --grid 64 --max-num-batched-tokens 100 2>&1 >/dev/null); rc=$?
check "--max-num-batched-tokens 100 on a grid of 64: refused" '[ $rc -ne 0 ] && echo "$err" | grep -q "multiple of the grid"'
err=$("$engined" --model "$tiny" --prompt-ids 1 --max-num-batched-tokens lots 2>&1 >/dev/null); rc=$?
check "--max-num-batched-tokens lots: refused" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected a positive multiple"'
# the backend: named in the first log line; --backend cpu gives auto's ids
# on a host without a GPU; a backend this build or host lacks, or a name
# that is none, is refused with one line and exit 2
log=$("$engined" --model "$golden/f32_untied" --prompt-ids 1,2,3 --max-tokens 3 --backend cpu 2>&1 >/dev/null)
check "the backend is logged at start" 'echo "$log" | head -n1 | grep -q "backend cpu"'
c1=$("$engined" --model "$tiny" --prompt-ids 9707,11,1879,0 --max-tokens 6 --ignore-eos --backend cpu 2>/dev/null)
check "--backend cpu: the same greedy ids" '[ "$c1" = "$a" ]'
err=$("$engined" --model "$tiny" --prompt-ids 1 --backend bogus 2>&1 >/dev/null); rc=$?
check "--backend bogus: refused" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected auto, cpu or cuda"'
if ! "$engined" --model "$golden/f32_untied" --prompt-ids 1 --max-tokens 1 --backend cuda >/dev/null 2>&1; then
	err=$("$engined" --model "$tiny" --prompt-ids 1 --backend cuda 2>&1 >/dev/null); rc=$?
	check "--backend cuda without CUDA: one clear line, exit 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "backend cuda: "'
fi
# --load-format dummy: a directory of config.json alone loads (seeded
# weights), twice the same ids; a checkpoint's own weights give others
dd=$(mktemp -d /tmp/moor-cli-XXXXXX)
cp "$tiny/config.json" "$dd/"
d1=$("$engined" --model "$dd" --prompt-ids 9707,11,1879,0 --max-tokens 6 --ignore-eos --load-format dummy 2>/dev/null)
d2=$("$engined" --model "$dd" --prompt-ids 9707,11,1879,0 --max-tokens 6 --ignore-eos --load-format dummy --threads 2 2>/dev/null)
check "--load-format dummy: ids '$d1' then '$d2'" '[ "$(echo "$d1" | wc -w)" -eq 6 ] && [ "$d1" = "$d2" ] && [ "$d1" != "$a" ]'
err=$("$engined" --model "$dd" --prompt-ids 1 2>&1 >/dev/null); rc=$?
check "config.json alone without --load-format dummy: refused" '[ $rc -ne 0 ]'
err=$("$engined" --model "$dd" --prompt-ids 1 --load-format bogus 2>&1 >/dev/null); rc=$?
check "--load-format bogus: refused" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected auto, safetensors or dummy"'
rm -rf "$dd"
[ $fail -eq 0 ] && echo "test_engined_cli: ok"
exit $fail
