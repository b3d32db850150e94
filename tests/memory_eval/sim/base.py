"""Replay fusions on a dump of `dump_runs_for_analysis` (tests/memory_quality.rs).

MEMORY_RUNS_DUMP=/tmp/runs.json SKILLHOST_EMBED_MODEL=... cargo test --release \
    --test memory_quality -- --ignored --nocapture dump_runs_for_analysis
then `python3 tests/memory_eval/sim/fuse.py /tmp/runs.json`. Choose constants on the run
"tuning" only; the others are reported, never fitted.
"""
import json, math, collections, sys
import numpy as np

CLASSES = ["exact", "synonym", "paraphrase", "crosslingual", "typo", "newest"]
NOISE = {"user", "用户"}


def script(text):
    cjk = letters = 0
    for c in text:
        if c.isalnum():
            letters += 1
            o = ord(c)
            cjk += any(a <= o <= b for a, b in [(0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF)])
    return 1 if cjk * 4 >= max(letters, 1) else 0


def load(path):
    D = json.load(open(path))
    runs = {r["name"]: r for r in D}
    ref = runs.pop("reference")
    ref["R"] = np.array([r["vec"] for r in ref["records"]], dtype=np.float32)
    ref["S"] = np.array([script(r["content"]) for r in ref["records"]])
    for run in runs.values():
        run["ids"] = [r["id"] for r in run["records"]]
        run["R"] = np.array([r["vec"] for r in run["records"]], dtype=np.float32)
        run["S"] = np.array([script(r["content"]) for r in run["records"]])
        run["rterms"] = [set(r["terms"]) for r in run["records"]]
        for q in run["queries"]:
            q["v"] = np.array(q["vec"], dtype=np.float32)
            q["s"] = script(q["query"])
            q["cos"] = run["R"] @ q["v"]
            q["rcos"] = ref["R"] @ q["v"]
            t = q["terms"]
            bare = q["query"].strip().rstrip("?？.。").lower()
            q["qterms"] = t if (len(t) == 1 and (bare == t[0] or bare == "users")) else [x for x in t if x not in NOISE]
    return runs, ref


def evaluate(run, ranker):
    tab = collections.defaultdict(lambda: [0, 0])
    none = [0, 0]
    misses = []
    for q in run["queries"]:
        got = ranker(run, q)
        if q["cls"] == "none":
            none[0] += 1
            none[1] += len(got) == 0
            continue
        rk = next((i for i, x in enumerate(got) if x in q["relevant"]), None)
        t = tab[q["cls"]]
        t[0] += 1
        t[1] += rk is not None and rk < 5
        if not (rk is not None and rk < 5):
            misses.append((q["cls"], q["query"], rk))
    return tab, none, misses


def summary(tab):
    n = sum(v[0] for v in tab.values())
    h = sum(v[1] for v in tab.values())
    return h / max(n, 1)


def report(runs, rankers, names=None, show_miss=None):
    for name, run in runs.items():
        if names and name not in names:
            continue
        res = {n: evaluate(run, f) for n, f in rankers.items()}
        print(f"== {name} ({len(run['records'])} rec, {len(run['queries'])} q)")
        print("  %-13s %4s" % ("class", "n") + "".join(f" {n:>9}" for n in rankers))
        for c in CLASSES + ["all"]:
            def val(t):
                if c == "all":
                    n = sum(v[0] for v in t.values())
                    h = sum(v[1] for v in t.values())
                else:
                    n, h = t.get(c, [0, 0])
                return n, (h / n if n else float("nan"))
            n = val(res[list(rankers)[0]][0])[0]
            if n == 0:
                continue
            print("  %-13s %4d" % (c, n) + "".join(f" {val(res[k][0])[1]:9.3f}" for k in rankers))
        print("  %-13s %4d" % ("none-empty", res[list(rankers)[0]][1][0]) + "".join(
            f" {res[k][1][1] / max(res[k][1][0], 1):9.3f}" for k in rankers))
        if show_miss:
            for m in res[show_miss][2]:
                print("    miss", m)


def hybrid(run, q):
    return q["hybrid"]


def dense(run, q):
    c = q["cos"]
    S = run["S"]
    sc = c.copy()
    for s in (0, 1):
        m = S == s
        if m.any():
            sc[m] -= c[m].mean()
    o = np.argsort(-sc)[:10]
    return [run["ids"][i] for i in o]


def lexical(run, q):
    return [i for i, _ in q["bm25"]][:10]


def wlexical(run, q):
    return [i for i, _ in q["wbm25"]][:10]
