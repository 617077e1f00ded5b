#!/usr/bin/env python3
"""ncu_sum.py CSV: sums an `ncu --csv --metrics gpu__time_duration.sum`
report by kernel name (the template arguments kept): count, total us,
share; then the count of kernels and their total, the figure to hold
against the step's wall time (the rest is the gaps between kernels)."""
import csv
import sys
from collections import defaultdict

rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[head]
kn, mn, mv = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
tot = defaultdict(float)
cnt = defaultdict(int)
for r in rows[head + 1:]:
    if len(r) <= mv or r[mn] != "gpu__time_duration.sum":
        continue
    name = r[kn]
    v = float(r[mv].replace(",", "")) / 1e3  # ns -> us
    tot[name] += v
    cnt[name] += 1
s = sum(tot.values())
n = sum(cnt.values())
print(f"{'kernel':<90} {'n':>5} {'us':>10} {'share':>6}")
for name, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{name[:90]:<90} {cnt[name]:>5} {v:>10.1f} {100 * v / s:>5.1f}%")
print(f"{n} kernels, {s / 1e3:.3f} ms of kernel time")
