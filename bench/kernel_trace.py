#!/usr/bin/env python3
"""Reads bench/kernel_trace.cpp's CSV: for each window that starts at an anchor
kernel (name contains --anchor, optional --grid-x), the window's span (first
kernel start to last kernel end before the next anchor), the GPU's busy time
(union of kernel / copy intervals), the largest idle gaps with what ran before
and after them and the runtime calls inside them, and a per-kernel table.

  python3 bench/kernel_trace.py trace.csv --anchor embedding_kernel --grid-x 3584
"""
import argparse
import collections
import csv


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["start_ns"] = int(r["start_ns"])
        r["end_ns"] = int(r["end_ns"])
    rows.sort(key=lambda r: r["start_ns"])
    return rows


def busy_ns(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def short(name, n=60):
    name = name.replace("void ", "").replace("specstack::<unnamed>::", "")
    return name[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--anchor", required=True, help="a kernel name part that starts a window")
    ap.add_argument("--grid-x", type=int, help="the anchor kernel's gridDim.x")
    ap.add_argument("--window", type=int, default=-1, help="which window (default: the last)")
    ap.add_argument("--gaps", type=int, default=12, help="largest gaps to list")
    a = ap.parse_args()
    rows = load(a.trace)
    device = [r for r in rows if r["what"] in ("kernel", "memcpy", "memset")]
    anchors = [i for i, r in enumerate(device) if r["what"] == "kernel" and a.anchor in r["name"]
               and (a.grid_x is None or int(r["grid_x"]) == a.grid_x)]
    if not anchors:
        raise SystemExit("no anchor kernel")
    any_anchor = [i for i, r in enumerate(device) if r["what"] == "kernel" and a.anchor in r["name"]]
    first = anchors[a.window]
    later = [i for i in any_anchor if i > first]
    last = (later[0] if later else len(device)) - 1
    win = device[first:last + 1]
    # a trailing host-to-device copy belongs to the next step
    while win and win[-1]["what"] != "kernel":
        win.pop()
    t0, t1 = win[0]["start_ns"], max(r["end_ns"] for r in win)
    busy = busy_ns([(r["start_ns"], r["end_ns"]) for r in win])
    print(f"windows: {len(anchors)}; window {a.window}: {len(win)} records, "
          f"span {(t1 - t0) / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms, idle {(t1 - t0 - busy) / 1e6:.3f} ms")
    gaps = []
    end = win[0]["end_ns"]
    for prev, r in zip(win, win[1:]):
        end = max(end, prev["end_ns"])
        if r["start_ns"] > end:
            gaps.append((r["start_ns"] - end, end, prev, r))
    gaps.sort(key=lambda g: -g[0])
    calls = [r for r in rows if r["what"] == "runtime"]
    print(f"gaps > 0: {len(gaps)}, sum {sum(g[0] for g in gaps) / 1e6:.3f} ms; largest:")
    for g, s, prev, r in gaps[:a.gaps]:
        inside = collections.Counter(c["name"] for c in calls
                                     if c["end_ns"] > s and c["start_ns"] < s + g)
        print(f"  {g / 1e3:9.1f} us after {short(prev['name'], 40)} before {short(r['name'], 40)}"
              f"  runtime: {dict(inside.most_common(4))}")
    # host calls from the previous device record's end to this window's end: the
    # step's own set-up (plan, uploads) shows as calls before its first kernel
    prev_end = device[first - 1]["end_ns"] if first > 0 else t0
    host = collections.defaultdict(lambda: [0, 0])
    for c in calls:
        if c["start_ns"] >= prev_end and c["start_ns"] < t1:
            h = host[c["name"]]
            h[0] += 1
            h[1] += c["end_ns"] - c["start_ns"]
    print(f"idle before the window: {(t0 - prev_end) / 1e6:.3f} ms; runtime calls from there to its end:")
    for name, (n, ns) in sorted(host.items(), key=lambda x: -x[1][1])[:10]:
        print(f"  {name}: {n} calls, {ns / 1e6:.3f} ms")
    agg = collections.OrderedDict()
    for r in win:
        key = (short(r["name"], 70), r["grid_x"], r["grid_y"])
        c = agg.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += r["end_ns"] - r["start_ns"]
    print("| kernel | grid | n | ms | share of span |")
    print("|---|---|---|---|---|")
    for (name, gx, gy), (n, ns) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"| {name} | {gx}x{gy} | {n} | {ns / 1e6:.3f} | {ns / (t1 - t0):.1%} |")


if __name__ == "__main__":
    main()
