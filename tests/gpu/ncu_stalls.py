#!/usr/bin/env python3
"""tests/gpu/ncu_stalls.py PAGE.csv [FROM TO]...: where one kernel's warps
wait, from ncu's per-instruction page (`ncu -i REPORT --page source --csv
--print-source sass`, which session.sh's dsrc phase writes): the stall
reasons' shares of the samples, the samples by opcode, the executed
instructions by opcode (IMAD.MOV, a register move, apart), the twelve
instructions with the most, and the share of each FROM..TO range of
instruction indices. `ncu_stalls.py -l PAGE.csv` lists every instruction
with its index, samples and executions, to find those ranges (a loop's
body, a phase between two barriers)."""
import collections
import csv
import sys


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    listing = argv[1] == '-l'
    path = argv[2] if listing else argv[1]
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[2:] if len(r) >= len(hdr)]
    col = 'Warp Stall Sampling (All Samples)'
    smp = [int(r[ix[col]] or 0) for r in data]
    src = [r[ix['Source']].strip() for r in data]
    if listing:
        ex = ix['Instructions Executed']
        for n, r in enumerate(data):
            print(n, smp[n], r[ex], src[n][:80])
        return
    total = sum(smp) or 1
    stalls = collections.Counter()
    for r in data:
        for h in hdr:
            if h.startswith('stall_') and 'Not Issued' not in h:
                v = r[ix[h]]
                if v and v != '-':
                    stalls[h[6:]] += int(v)
    ops = collections.Counter()
    mix = collections.Counter()  # instructions executed (warp-level)
    ex = ix['Instructions Executed']
    for n, s in enumerate(src):
        words = s.split()
        if words and words[0].startswith('@'):
            words = words[1:]
        op = words[0] if words else '?'
        # IMAD.MOV is a register move: told apart from the arithmetic
        op = 'IMAD.MOV' if op.startswith('IMAD.MOV') else op.split('.')[0]
        ops[op] += smp[n]
        mix[op] += int(data[n][ex] or 0)
    print(rows[0][1] if len(rows[0]) > 1 else path)
    print('samples', total)
    print('stalls:', ', '.join('%s %.0f%%' % (k, 100 * v / total)
                               for k, v in stalls.most_common(8)))
    print('opcodes:', ', '.join('%s %.0f%%' % (k, 100 * v / total)
                                for k, v in ops.most_common(10)))
    nex = sum(mix.values()) or 1
    print('executed %d:' % nex, ', '.join('%s %.0f%%' % (k, 100 * v / nex)
                                          for k, v in mix.most_common(10)))
    for n in sorted(range(len(data)), key=lambda i: -smp[i])[:12]:
        print('  %5d %6d  %s' % (n, smp[n], src[n][:70]))
    args = argv[2:]
    for a, b in zip(args[0::2], args[1::2]):
        print('%s..%s: %.1f%%' % (a, b,
                                  100 * sum(smp[int(a):int(b) + 1]) / total))


if __name__ == '__main__':
    main(sys.argv)
