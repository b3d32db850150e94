"""Issue 31, second round: the default fusion (`FusionParams::meaning_first` in
host/src/memory/hybrid.rs), replayed on the dump (see base.py and README.md).

What is kept is the calibrated fusion's rule (fuse.py `make`, every kept record); the kept
records rank by meaning first: a record's cosine minus its script's crowd mean (the store's
records of that script plus `W` pseudo-records distributed as the query's cosines to the
reference passages of that script), over one spread pooled across both scripts, plus
`bonus` for records of the query's script, plus `lw` x the rarity-weighted BM25 share."""
import sys
from base import *
import fuse

RUNS, REF = fuse.RUNS, fuse.REF
RR, RS = REF["R"], REF["S"]
ALL = ["tuning", "held-out", "second-5", "second-50", "second-300", "small-4"]


def evidence2(run, q, W=5.0, sd_mode="pooled", bonus=0.0):
    """The ranking's measure of meaning. sd_mode: the spread pooled across both scripts
    ("pooled"), each script's own ("own"), or the query's reference cosines' ("ref")."""
    c = q["cos"]
    z = np.zeros(len(c))
    stats = {}
    for s in (0, 1):
        m = run["S"] == s
        rc = q["rcos"][RS == s]
        n = m.sum()
        mean = (c[m].sum() + W * rc.mean()) / (n + W)
        sq = ((c[m] ** 2).sum() + W * (rc ** 2).mean()) / (n + W)
        sd = np.sqrt(max(sq - mean * mean, 1e-8))
        stats[s] = (m, mean, sd, rc.std())
    pooled = np.sqrt(np.mean([v[2] ** 2 for v in stats.values()]))
    for s, (m, mean, sd, rsd) in stats.items():
        z[m] = (c[m] - mean) / {"own": sd, "pooled": pooled, "ref": rsd}[sd_mode]
    z[run["S"] == q["s"]] += bonus
    return z


def keeper(floor=2.8, fww=1.4, xfloor=3.2):
    """The calibrated fusion's rule for what is kept (FusionParams::calibrated), with
    `xfloor` the floor for records of the other script when no record shares a word with
    the query (None: `floor`, as calibrated)."""
    fuse.CONST, fuse.WSAME = "same", 5
    return fuse.make(W=5, lw=0.7, floor=floor, fww=fww, scale=263, fullfloor="xscript", limit=None, xfloor=xfloor)


def meaning_first(W=5.0, sd_mode="pooled", lw=0.5, bonus=0.25, keep=None):
    keep = keep or keeper()

    def f(run, q):
        if not q["qterms"]:
            return [i for i, _ in q["bm25"]][:10]
        kept = set(keep(run, q))
        bm = dict(q["wbm25"])
        best = max(bm.values()) if bm else 1.0
        score = evidence2(run, q, W, sd_mode, bonus) + lw * np.array([bm.get(x, 0.0) / best for x in run["ids"]])
        return [run["ids"][i] for i in np.argsort(-score) if run["ids"][i] in kept][:10]
    return f


constraints = fuse.constraints


if __name__ == "__main__":
    cal = keeper()
    keeper()  # the calibrated crowd (fuse.CONST, fuse.WSAME)
    calibrated = fuse.make(W=5, lw=0.7, floor=2.8, fww=1.4, scale=263, fullfloor="xscript")
    saved = fuse.CONST, fuse.WSAME
    fuse.CONST, fuse.WSAME = "all", None
    store_crowd = fuse.make(W=20, lw=0.7, floor=1.8, fww=1.4)
    runs_none = {name: evaluate(RUNS[name], store_crowd)[1] for name in ALL}
    fuse.CONST, fuse.WSAME = saved
    print("store-crowd (replayed) leaves unanswered:", {k: "%d/%d" % (v[1], v[0]) for k, v in runs_none.items()})
    report(RUNS, {"lexical": wlexical, "dense": dense, "dumped": hybrid, "calibrated": calibrated,
                  "meaning-1st": meaning_first()}, names=ALL)
    constraints(meaning_first(), True)
