"""A parametric fusion, replayed on the dump (see base.py)."""
import itertools, sys
import numpy as np
from base import *

RUNS, REF = load(next((a for a in sys.argv[1:] if a.endswith(".json")), "/tmp/runs.json"))
RR, RS = REF["R"], REF["S"]


CONST = None
WSAME = None
RC = RR @ RR.T
np.fill_diagonal(RC, np.nan)
HBAR = {(a, b): np.nanmean(RC[np.ix_(RS == a, RS == b)]) for a in (0, 1) for b in (0, 1)}


def hubs(run):
    if "hub" not in run:
        C = run["R"] @ RR.T
        run["hub"] = np.stack([C[:, RS == s].mean(1) for s in (0, 1)], 1)
    return run["hub"]


def crowd_z(run, q, W, minsd=0.0, pooled=False, bonus=0.0, beta=0.0):
    """z of each record's cosine against its script's crowd: the store's records of that
    script plus W pseudo-records distributed as the query's cosines to the reference
    passages of that script."""
    c = q["cos"]
    if beta:
        h = hubs(run)[:, q["s"]]
        c = c - beta * (h - np.array([HBAR[(rs, q["s"])] for rs in run["S"]]))
    z = np.zeros(len(c))
    stats = []
    for s in (0, 1):
        m = run["S"] == s
        rc = q["rcos"][RS == s]
        n = m.sum()
        Wp = W
        if CONST and (s == q["s"] or CONST == "all"):
            pm, psq = 0.78, 0.035 ** 2 + 0.78 ** 2
            Wp = WSAME if WSAME is not None else W
        else:
            pm, psq = rc.mean(), (rc ** 2).mean()
        mean = (c[m].sum() + Wp * pm) / max(n + Wp, 1e-9)
        sq = ((c[m] ** 2).sum() + Wp * psq) / max(n + Wp, 1e-9)
        sd = max(np.sqrt(max(sq - mean * mean, 1e-8)), minsd)
        stats.append((m, mean, sd))
    if pooled:
        sd = np.sqrt(np.mean([x[2] ** 2 for x in stats]))
        stats = [(m, mean, sd) for m, mean, _ in stats]
    for m, mean, sd in stats:
        z[m] = (c[m] - mean) / sd
    z[run["S"] == q["s"]] += bonus * W / (W + len(c))
    return z


def make(W=20.0, lw=0.7, floor=1.8, fww=1.4, lfloor=0.0, mode="sum", k=10, weighted=True, holds=True, scale=None, pooled=False, bonus=0.0, fullfloor=False, gap=None, beta=0.0, limit=10, xfloor=None):
    def f(run, q):
        if not q["qterms"]:
            return [i for i, _ in q["bm25"]][:10]
        lex = q["wbm25"] if weighted else q["bm25"]
        bm = dict(lex)
        best = max(bm.values()) if bm else 1.0
        z = crowd_z(run, q, W, pooled=pooled, bonus=bonus, beta=beta)
        n = len(run["ids"])
        sc = 1.0
        if scale:
            sc = np.sqrt(np.log(max(n, 2)) / np.log(scale))
        qt = set(q["qterms"])
        full = any(qt <= run["rterms"][idx_] for idx_, x in enumerate(run["ids"]) if x in bm) if bm else False
        fl = sc * (fww if bm and not (fullfloor and full) else floor)
        if fullfloor == "unscaled" and full:
            fl = floor
        flx = fl
        if xfloor is not None and not bm:
            # records of the other script when no record shares a word with the query
            flx = sc * xfloor
        if fullfloor == "xscript" and full:
            fl = sc * (fww if bm else floor)
            flx = floor
        idx = {x: i for i, x in enumerate(run["ids"])}
        if mode == "sum":
            score = z + np.array([lw * bm.get(x, 0.0) / best if best > 0 else 0 for x in run["ids"]])
        else:
            rz = np.empty(n)
            rz[np.argsort(-z)] = np.arange(n)
            score = 1.0 / (k + 1 + rz)
            for r, (x, _) in enumerate(lex):
                if x in idx:
                    score[idx[x]] += lw / (k + 1 + r)
        out = []
        top = z.max()
        for i in np.argsort(-score):
            x = run["ids"][i]
            keep = z[i] >= (flx if run["S"][i] != q["s"] else fl) or (x in bm and (z[i] >= lfloor or (holds and qt <= run["rterms"][i])))
            if keep and gap is not None and x not in bm and z[i] < top - gap:
                keep = False
            if keep:
                out.append(x)
        return out[:limit]
    return f


def constraints(f, verbose=False):
    """The small stores other tests assert on: each query finds its record first, the
    recall-5 queries find exactly one, queries about nothing find nothing."""
    bad = []
    for name in ("small-4", "embed-4", "recall-5", "recall-indent"):
        run = RUNS[name]
        for q in run["queries"]:
            got = f(run, q)
            if q["cls"] == "none":
                ok = not got
            else:
                ok = bool(got) and got[0] in q["relevant"]
                if name == "recall-5":
                    ok = ok and len(got) == 1
            if not ok:
                bad.append((name, q["query"], [run["records"][run["ids"].index(x)]["content"][:30] for x in got[:3]]))
    if verbose:
        for b in bad:
            print("   constraint", b)
    return bad


if __name__ == "__main__":
    base = make()
    report(RUNS, {"lexical": wlexical, "dense": dense, "hybrid": hybrid, "replay": base},
           names=["tuning", "held-out", "second-5", "second-50", "second-300", "small-4"])
    constraints(base, True)
