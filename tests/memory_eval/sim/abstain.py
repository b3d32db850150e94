"""Issue 31, fourth round: choosing the per-query answer's measure and threshold on the
tuning half, now that it holds enough questions that share no word with the store
(tests/memory_eval/tuning_queries.jsonl: 36 answerable, 16 about nothing, written before
any measurement with them).

The rule, stated before the first run of this script:
- a question that shares no word with the store is answered in full (every record, ranked
  as the default ranks) when a per-query measure clears a threshold; otherwise the floors
  decide, record by record (gate.py; questions that share words are unchanged);
- candidate measures (e: gen.py's `evidence2`, the ranking's own score; sc:
  sqrt(ln n / ln 263), the floors' store-size scale):
    gate     e_top / sc                          (the third round's measure)
    margin3  e_top - mean of the next three e    (gate_features.py's steadiest)
    margin1  e_top - e_second
    zref     the best record's reference-only z  (conflicts.py `zref`)
    gate+m3  e_top / sc + margin3                (equal weights, not fitted)
- objective: the highest tuning-half R@5 (all classes) subject to (a) at least 60 % of the
  tuning half's questions about nothing left unanswered (what the floors alone left on its
  first 15: 9), (b) the small stores the tests assert on answering as asserted
  (fuse.constraints); ties: more questions about nothing unanswered, then the middle of
  the tied thresholds (not the edge).
- the held-out half and the second set are then reported once, untouched.

What the first run showed, and the one change made after it (before the held-out half or
the second set was looked at): constraint (a) cannot be met by any rule of this kind. The
floors alone answer 17 of the tuning half's 31 questions about nothing (0.45 left
unanswered): the new ones are in the store's own domain and most share a word with it
(only 5 of the 16 share none), and the per-query answer only ever concerns questions that
share none, so it can only lower that share. (a) is therefore read as what it was meant to
say, "no more questions about nothing answered than the floors alone answer", and the
1:1 trade (one more question found against one more question about nothing answered) is
printed next to it. Of the tuning half's 26 questions that share no word with the store,
9 are answerable and 17 are about nothing; the ranking puts the record of 4 of the 9 in
its top five, one of which the floors already keep (dense-only misses the other 5 too), so
a per-query answer can win at most 3 of 119 (R@5 0.765 -> 0.790, replayed).

Result (tuning half; the Rust run agrees: R@5 0.748 there, byte-rounded cosines): no
measure and no threshold finds a question more without answering at least one more
question about nothing (the best trades, margin3's, are +1/+1 and +2/+2; the gate's own
measure +1/+3 at best), so under (a) every measure ties with the floors alone (R@5 0.765,
0.45 unanswered), at every threshold from where it starts answering questions about
nothing up. The areas under the ROC curve, 4 winnable questions against 17 about nothing:
gate 0.54, margin3 0.69, margin1 0.63, zref 0.46, gate+m3 0.63 (the margin again the
steadiest, but it wins nothing at the 1:1 trade either). The tie-break "the middle of the
tied thresholds" has no middle when the tie runs from a threshold up to no answer at all;
the tuning half cannot tell any of them from today's gate (3.9, inside every tie) or from
none, so the search is left as it is: choosing between them on the second set would be
tuning on it.

`python3 abstain.py /tmp/runs.json` (`--report` adds every run's table)."""
import io, contextlib

with contextlib.redirect_stdout(io.StringIO()):
    from gate import *
    from conflicts import zref

X_MIN = 0.60
FLOORS_EMPTY = 1.0


def measures(run, q):
    e = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
    n = len(e)
    sc = np.sqrt(np.log(max(n, 2)) / np.log(263))
    s = np.sort(e)[::-1]
    m3 = s[0] - s[1:4].mean() if n > 1 else s[0]
    m1 = s[0] - s[1] if n > 1 else s[0]
    return {"gate": s[0] / sc, "margin3": m3, "margin1": m1, "zref": zref(run, q).max(), "gate+m3": s[0] / sc + m3}


NAMES = ["gate", "margin3", "margin1", "zref", "gate+m3"]
_cache = {}


def cached(run, q):
    key = (run["name"], q["query"])
    if key not in _cache:
        _cache[key] = measures(run, q)
    return _cache[key]


def ruled(name, t):
    def f(run, q):
        if not q["qterms"]:
            return [i for i, _ in q["bm25"]][:10]
        kept = set(KEEP(run, q))
        bm = dict(q["wbm25"])
        best = max(bm.values()) if bm else 1.0
        e = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
        score = e + RANK_LW * np.array([bm.get(x, 0.0) / best for x in run["ids"]])
        if not bm and cached(run, q)[name] >= t:
            kept.update(run["ids"])
        return [run["ids"][i] for i in np.argsort(-score) if run["ids"][i] in kept][:10]
    return f


def thresholds(name):
    run = RUNS["tuning"]
    vals = sorted({cached(run, q)[name] for q in run["queries"] if q["qterms"] and not q["wbm25"]})
    # every distinct cut between the tuning half's values, plus one above all
    cuts = [(a + b) / 2 for a, b in zip(vals, vals[1:])] + [vals[-1] + 1e-3, vals[0] - 1e-3]
    return sorted(cuts)


def choose():
    tun = RUNS["tuning"]
    best = {}
    for name in NAMES:
        rows = []
        for t in thresholds(name):
            f = ruled(name, t)
            r5, empty = overall(tun, f)
            rows.append((t, r5, empty, f))
        ok = [r for r in rows if r[2] >= X_MIN - 1e-9] or [r for r in rows if r[2] >= FLOORS_EMPTY - 1e-9]
        if not ok:
            continue
        top = max((r[1], r[2]) for r in ok)
        tied = [r for r in ok if (r[1], r[2]) == top]
        # constraints only on the tied rows (checking every row is slow)
        tied = [r for r in tied if not constraints(r[3])] or []
        if not tied:
            ok2 = [r for r in ok if not constraints(r[3])]
            if not ok2:
                continue
            top = max((r[1], r[2]) for r in ok2)
            tied = [r for r in ok2 if (r[1], r[2]) == top]
        lo, hi = tied[0][0], tied[-1][0]
        best[name] = ((lo + hi) / 2, top[0], top[1], lo, hi, len(rows))
        print("%-8s R@5 %.3f  none-empty %.2f  thresholds %.3f-%.3f (of %d cuts) -> %.3f"
              % (name, top[0], top[1], lo, hi, len(rows), (lo + hi) / 2))
    top = max((v[1], v[2]) for v in best.values())
    tied = [k for k, v in best.items() if (v[1], v[2]) == top]
    print("best under the constraint: R@5 %.3f, none-empty %.2f, tied between %s" % (top + (tied,)))
    return tied, best


def auc(pos, neg):
    if not pos or not neg:
        return float("nan")
    return np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])


def separations(run):
    """Area under the ROC curve of each measure: questions that share no word with the
    store whose record the ranking puts in its top five (what an answer can win) against
    those about nothing (what it must leave unanswered)."""
    P, N = {}, {}
    for q in run["queries"]:
        if not q["qterms"] or q["wbm25"]:
            continue
        m = cached(run, q)
        if q["cls"] == "none":
            for k in NAMES:
                N.setdefault(k, []).append(m[k])
            continue
        e = evidence2(run, q, RANK_W, "pooled", RANK_BONUS)
        if any(run["ids"][i] in q["relevant"] for i in np.argsort(-e)[:5]):
            for k in NAMES:
                P.setdefault(k, []).append(m[k])
    print("winnable %d, about nothing %d: " % (len(P.get("gate", [])), len(N.get("gate", [])))
          + "  ".join("%s %.2f" % (k, auc(P.get(k, []), N.get(k, []))) for k in NAMES))


def net(run, f, base):
    """(questions found more, questions about nothing answered more) than `base`."""
    t1, n1, _ = evaluate(run, f)
    t0, n0, _ = evaluate(run, base)
    found = sum(v[1] for v in t1.values()) - sum(v[1] for v in t0.values())
    return found, n0[1] - n1[1]


if __name__ == "__main__":
    for run_name, run in RUNS.items():
        run["name"] = run_name
    tun = RUNS["tuning"]
    nw = [q for q in tun["queries"] if q["qterms"] and not q["wbm25"]]
    print("tuning half: %d questions share no word with the store (%d about nothing)"
          % (len(nw), sum(q["cls"] == "none" for q in nw)))
    floors = meaning_first()
    print("floors alone: R@5 %.3f none-empty %.2f; gate 3.9: R@5 %.3f none-empty %.2f"
          % (overall(tun, floors) + overall(tun, gated(3.9))))
    # the trade-off per measure on the tuning half
    for name in NAMES:
        print(name)
        for t in thresholds(name)[:: max(1, len(thresholds(name)) // 12)]:
            print("   %.3f  R@5 %.3f  none-empty %.2f" % ((t,) + overall(tun, ruled(name, t))))
    FLOORS_EMPTY = overall(tun, floors)[1]
    print("tuning half, separations:")
    separations(tun)
    print("the 1:1 trade on the tuning half (found more, about nothing answered more than the floors alone):")
    for name in NAMES:
        trades = sorted({net(tun, ruled(name, t), floors) for t in thresholds(name)})
        print("  %-8s" % name, " ".join("%+d/%+d" % x for x in trades if x[0] > 0))
    tied, best = choose()
    # All tied: the tuning half cannot tell the measures apart, nor any threshold of theirs
    # from no per-query answer at all; today's gate (3.9) is in every tie and stays.
    if "gate" in tied and best["gate"][3] <= 3.9:
        print("kept: gate >= 3.9 (in the tied range %.3f and up)" % best["gate"][3])
    if "--report" in sys.argv:
        report(RUNS, {"lexical": wlexical, "dense": dense, "floors": floors, "gate 3.9": gated(3.9)},
               names=ALL[:5])
        constraints(gated(3.9), True)
