import fuse
from fuse import *
import itertools
fuse.CONST = "same"
tun = RUNS["tuning"]
def full(f):
    out = {}
    for c in CLASSES + ['all', 'none']:
        h = n = 0
        for name in ('tuning', 'held-out'):
            run = RUNS[name]
            for q in run['queries']:
                if c == 'none':
                    if q['cls'] == 'none':
                        n += 1; h += not f(run, q)
                    continue
                if q['cls'] == 'none' or (c != 'all' and q['cls'] != c): continue
                got = f(run, q); rk = next((i for i, x in enumerate(got) if x in q['relevant']), None); n += 1; h += rk is not None and rk < 5
        out[c] = round(h / n, 3)
    return out
def ok(o):
    return o['exact'] == 1 and o['all'] >= 0.88 and o['paraphrase'] >= 0.65 and o['crosslingual'] >= 0.84 and o['newest'] >= 0.92 and o['none'] >= 0.5
if __name__ == "__main__":
    # How FusionParams::calibrated() was chosen: tuning half only; `full` (both halves,
    # the floors hybrid_search_finds_what_was_meant asserts) is printed, never maximised.
    res = []
    for ws, W, lw, floor, fww, ff in itertools.product([2, 3, 5, 8, 20], [3, 5, 8, 10, 20], [0.3, 0.5, 0.7, 1.0],
                                                        [1.8, 2.2, 2.6, 2.7, 2.8, 2.9, 3.0, 3.4], [1.0, 1.4, 1.8],
                                                        ["xscript"]):
        fuse.WSAME = ws
        f = make(W=W, lw=lw, floor=floor, fww=fww, scale=263, fullfloor=ff)
        tab, none, _ = evaluate(tun, f)
        if none[1] * 2 < none[0]:
            continue
        if constraints(f):
            continue
        res.append((round(summary(tab), 3), (ws, W, lw, floor, fww, ff), none[1], ok(full(f))))
    res.sort(key=lambda r: r[0], reverse=True)
    for r in res[:20]:
        print(r)
