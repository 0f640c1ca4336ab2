#!/usr/bin/env python3
# One decode step's kernels out of an `ncu --csv` log (issue 11, session 24):
# the launches from the last embedding kernel to the end of the log, grouped
# by kernel and grid, with their gpu__time_duration. The log comes from
#   ncu --graph-profiling node --metrics gpu__time_duration.sum --clock-control none \
#       --cache-control none --csv --log-file LOG.csv \
#     gpu_bench --config CONFIG --prefill 16 --decode-batch 1 --decode-context 64 \
#       --decode-steps 3 --repeats 1 [--quantization fp8]
# (the last step of the last generate call is a batch-1 decode step replayed
# from its CUDA graph; ncu times every node alone, so the sum has no launch
# gaps and no PDL overlap). Usage: decode_step_ncu.py LOG.csv
import csv, sys, collections, re
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", "")); u = r["Metric Unit"]
    us = v / 1000 if u in ("ns", "nsecond") else v * 1000 if u in ("ms", "msecond") else v
    rows.append((int(r["ID"]), r["Kernel Name"], us, r.get("Grid Size", ""), r.get("Block Size", "")))
rows.sort()
emb = [i for i, r in enumerate(rows) if "embedding" in r[1]]
print("kernels profiled", len(rows), "embedding launches", len(emb))
if len(emb) < 2: sys.exit()
step = rows[emb[-1]:]
def short(n):
    n = re.sub(r"\(.*", "", n); n = re.sub(r"^void ", "", n); n = re.sub(r"specstack::cuda::(\(anonymous namespace\)::)?", "", n)
    return n[:60]
agg = collections.OrderedDict()
for _, n, us, g, b in step:
    k = short(n) + " grid" + g
    a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += us
tot = sum(r[2] for r in step)
print("one step: %d kernels, sum of kernel times %.1f us" % (len(step), tot))
print("| kernel (grid) | launches | total us | us each | share |")
for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("| %s | %d | %.1f | %.2f | %.1f%% |" % (k, c, t, t / c, 100 * t / tot))
