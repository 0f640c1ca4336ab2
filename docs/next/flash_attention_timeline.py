#!/usr/bin/env python3
"""Per-CTA timeline of the Hopper prefill attention kernel (session 43, not run yet).

Apply docs/next/flash-attention-timeline.patch (an experiment build: the kernel stamps
clock64 / %globaltimer at its phases into a __device__ array, flash_attention_bench dumps
the last launch's stamps when FA_TL names a file), build flash_attention_bench, then on
the device:

  FA_TL=/tmp/tl.csv flash_attention_bench --points 8192:0:0:14:2:64
  python3 flash_attention_timeline.py /tmp/tl.csv

Fields a CTA: 0 globaltimer at entry, 1 clock at entry, 2 clock after the row metadata /
tile range, 3 SM id, 4 key tiles, 5 consumer 0 Q ready, 6 its first K tile full, 7 its
first tile's QK + softmax done, 8 its tile loop done, 9 last P V done, 10 epilogue done,
11 globaltimer then, 12 producer's first K tile issued, 13 / 14 last consumer's end
(globaltimer / clock), 15 blockIdx.y. Prints the means / percentiles of each phase, the
steady per-tile time, a CTA's span minus its tiles at that rate (the per-CTA overhead
the session-43 fit put at ~11 us), and the idle gap on each SM between a CTA's end and
the next one's start.
"""
import sys, collections
rows=[list(map(int,l.split(','))) for l in open(sys.argv[1])]
# cycle->ns from consumer-0 span
ratios=[(r[11]-r[0])/(r[10]-r[1]) for r in rows if r[10]>r[1]]
ns_per_cyc=sorted(ratios)[len(ratios)//2]
us=lambda c: c*ns_per_cyc/1000
agg=collections.defaultdict(list)
for r in rows:
    n=r[4]
    agg['entry->meta'].append(us(r[2]-r[1]))
    agg['entry->K0 issued (producer)'].append(us(r[12]-r[1]))
    agg['entry->Q ready (c0)'].append(us(r[5]-r[1]))
    agg['entry->K0 full (c0)'].append(us(r[6]-r[1]))
    agg['tile0 QK+softmax'].append(us(r[7]-r[6]))
    if n>1: agg['steady per tile'].append(us(r[8]-r[7])/(n-1))
    agg['last PV'].append(us(r[9]-r[8]))
    agg['epilogue (c0)'].append(us(r[10]-r[9]))
    agg['c_last end - c0 end'].append((r[13]-r[11])/1000)
    agg['CTA span (c0 end)'].append(us(r[10]-r[1]))
    agg['tiles'].append(n)
tile=sorted(agg['steady per tile'])[len(agg['steady per tile'])//2]
for r in rows:
    agg['span - n*tile'].append(us(r[10]-r[1]) - r[4]*tile)
# SM gaps
by_sm=collections.defaultdict(list)
for r in rows: by_sm[r[3]].append((r[0], max(r[11],r[13])))
gaps=[]
for sm,l in by_sm.items():
    l.sort()
    for a,b in zip(l,l[1:]): gaps.append((b[0]-a[1])/1000)
agg['SM gap end->next start'] = gaps
t0=min(r[0] for r in rows); t1=max(max(r[11],r[13]) for r in rows)
print("ns/cycle %.3f  CTAs %d  SMs %d  kernel span %.1f us"%(ns_per_cyc,len(rows),len(by_sm),(t1-t0)/1000))
for k,v in agg.items():
    v=sorted(v); print("%-30s mean %8.2f  p10 %8.2f  p50 %8.2f  p90 %8.2f"%(k,sum(v)/len(v),v[len(v)//10],v[len(v)//2],v[9*len(v)//10]))
# per SM busy
busy=[sum(b-a for a,b in l)/1000 for l in by_sm.values()]
print("SM busy us: min %.1f mean %.1f max %.1f"%(min(busy),sum(busy)/len(busy),max(busy)))
