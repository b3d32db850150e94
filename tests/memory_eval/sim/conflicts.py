"""Why no per-record floor on a calibrated cosine meets both issue 31's small store and the
small stores other tests assert on (tests/memory_embed.rs, tests/memory_recall.rs).

For each small store, each record a test needs kept (its query's answer, found by meaning
alone: the query shares no word with it) and each record a test needs dropped (everything a
query about nothing finds, and the other records when one record holds every word of the
query), under two absolute measures: `zref`, the cosine against the query's cosines to the
reference passages of the record's script (calibration.txt; no store crowd at all), and
`e`, gen.py's evidence (the store's crowd of that script plus 5 reference pseudo-records,
pooled spread). A floor works only if every "keep" is above every "drop" of the same kind.
`python3 conflicts.py /tmp/runs.json`."""
from gen import *


def zref(run, q):
    c = q["cos"]
    z = np.zeros(len(c))
    for s in (0, 1):
        m = run["S"] == s
        rc = q["rcos"][RS == s]
        z[m] = (c[m] - rc.mean()) / rc.std()
    return z


def main():
    rows = []
    for name in ("small-4", "embed-4", "recall-5", "recall-indent", "second-5"):
        run = RUNS[name]
        for q in run["queries"]:
            zr, e = zref(run, q), evidence2(run, q, W=5, sd_mode="pooled")
            bm = dict(q["wbm25"])
            qt = set(q["qterms"])
            full = any(qt <= run["rterms"][i] for i, x in enumerate(run["ids"]) if x in bm)
            for i, x in enumerate(run["ids"]):
                same = "same" if run["S"][i] == q["s"] else "cross"
                if q["cls"] == "none":
                    rows.append(("drop", name, same, zr[i], e[i], q["query"], run["records"][i]["content"]))
                elif x in q["relevant"] and x not in bm:
                    rows.append(("keep", name, same, zr[i], e[i], q["query"], run["records"][i]["content"]))
                elif full and x not in bm and name == "recall-5":
                    rows.append(("drop*", name, same, zr[i], e[i], q["query"], run["records"][i]["content"]))
    rows.sort(key=lambda r: -r[3])
    print("need   store          pair    zref      e  query -> record   (drop*: another record holds every query word)")
    for r in rows:
        if r[0] != "drop" or r[3] > 1.5:
            print("%-6s %-14s %-5s %6.2f %6.2f  %s -> %s" % (r[0], r[1], r[2], r[3], r[4], r[5][:40], r[6][:40]))


if __name__ == "__main__":
    main()
