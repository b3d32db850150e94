"""How well per-query measures tell a question that shares no word with the store and whose
record the ranking puts in its top five (what a gate can win) from a question about nothing
(what it must leave unanswered): the area under the ROC curve per run (1: a gate separates
them; 0.5: chance). `python3 gate_features.py /tmp/runs.json`. Measured after the gate was
chosen; the tuning half has only 2 such questions against 12, too few to choose a measure on.
"""
import sys


import io, contextlib
with contextlib.redirect_stdout(io.StringIO()):
    from gate import *
    import fuse
from conflicts import zref
def feats(run, q):
    out = {}
    e = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
    n = len(e); sc = np.sqrt(np.log(max(n, 2)) / np.log(263))
    out["e/sc"] = e.max() / sc
    for beta in (0.5, 1.0, 2.0):
        h = fuse.hubs(run)[:, q["s"]]
        hb = np.array([fuse.HBAR[(rs, q["s"])] for rs in run["S"]])
        c0 = q["cos"]
        q["cos"] = c0 - beta * (h - hb)
        e2 = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
        q["cos"] = c0
        out["hub%.1f" % beta] = e2.max() / sc
    zr = zref(run, q); out["zref"] = zr.max()
    # top-k mean vs top
    s = np.sort(e)[::-1]
    out["e-top3"] = (s[0] - s[1:4].mean()) if n > 3 else s[0]
    return out
def auc(pos, neg):
    if not pos or not neg: return float("nan")
    return np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
for name in ALL[:5]:
    run = RUNS[name]
    P, N = {}, {}
    for q in run["queries"]:
        if not q["qterms"] or q["wbm25"]: continue
        f = feats(run, q)
        # graded queries whose relevant record is in the ranking's top 5 (what a gate can win)
        if q["cls"] == "none":
            for k, v in f.items(): N.setdefault(k, []).append(v)
        else:
            e = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
            top = [run["ids"][i] for i in np.argsort(-e)[:5]]
            if any(x in q["relevant"] for x in top):
                for k, v in f.items(): P.setdefault(k, []).append(v)
    print(name, len(P.get("zref", [])), len(N.get("zref", [])), "  ".join("%s %.2f" % (k, auc(P.get(k, []), N.get(k, []))) for k in (N or P)))
