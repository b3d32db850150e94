"""Replays hybrid.rs's fusion on a dump of what it sees, to try its constants quickly.

    SKILLHOST_EMBED_MODEL=... MEMORY_EVAL_DUMP=/tmp/dump.json \
        cargo test --release --test memory_quality -- --ignored dump_for_analysis
    python3 tests/memory_eval/fusion_sim.py /tmp/dump.json [floor_with_words lexical_weight]

The dump holds, per query of queries.jsonl, the BM25 hits (lexical store), the query's
cosine to every record and the real hybrid top 10; this script prints R@5 per class for
the replayed fusion next to the real one (they should agree: same z-scores, same gates).
Newer-first reordering (merge.rs) is not replayed, so a few lists differ in order."""
import collections, json, math, sys

dump = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/memory_eval_dump.json"))
records = dump["records"]
CLASSES = ["exact", "synonym", "paraphrase", "crosslingual", "typo", "newest"]


def script(text):
    cjk = letters = 0
    for c in text:
        if c.isalnum():
            letters += 1
            o = ord(c)
            cjk += any(a <= o <= b for a, b in [(0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF)])
    return "cjk" if cjk * 4 >= max(letters, 1) else "latin"


for r in records:
    r["script"] = script(r["content"])

# hybrid.rs FusionParams::default()
P = dict(lexical_weight=0.7, floor=1.8, floor_with_words=1.4, lexical_floor=0.0, prior_mean=0.78, prior_std=0.035, prior_weight=20.0, candidates=100)


def moments(cos, p):
    out = {}
    for s in ("latin", "cjk"):
        xs = [c for c, r in zip(cos, records) if r["script"] == s]
        n = len(xs) + p["prior_weight"]
        mean = (sum(xs) + p["prior_weight"] * p["prior_mean"]) / n
        sq = sum(x * x for x in xs) + p["prior_weight"] * (p["prior_std"] ** 2 + p["prior_mean"] ** 2)
        out[s] = (mean, math.sqrt(max(sq / n - mean * mean, 1e-6)))
    return out


def fuse(q, **kw):
    p = dict(P, **kw)
    if not [t for t in q["terms"] if t not in ("user", "用户")] and len(q["terms"]) != 1:
        return []  # only question words: lexical search, which finds nothing
    lexical = sorted(q["bm25"], key=lambda x: (-x[1], x[0]))[: p["candidates"]]
    cos = q["cos"]["query"]
    stats = moments(cos, p)
    z = {r["id"]: (c - stats[r["script"]][0]) / stats[r["script"]][1] for c, r in zip(cos, records)}
    dense = sorted(z, key=lambda i: -z[i])[: p["candidates"]]
    live = {r["id"] for r in records if r["live"]}
    best = max([s for _, s in lexical], default=0.0)
    bm25 = dict(lexical)
    floor = p["floor_with_words"] if lexical else p["floor"]
    out = []
    for i in (set(bm25) | set(dense)) & live:
        share = bm25[i] / best if i in bm25 and best > 0 else (0.0 if i in bm25 else None)
        if z[i] >= floor or (share is not None and z[i] >= p["lexical_floor"]):
            out.append((i, z[i] + p["lexical_weight"] * (share or 0.0)))
    out.sort(key=lambda x: (-x[1], x[0]))
    return [i for i, _ in out[:10]]


def table(rank, label):
    hits = collections.defaultdict(lambda: [0, 0])
    none = [0, 0]
    for q in dump["queries"]:
        got = rank(q)
        if q["cls"] == "none":
            none[0] += 1
            none[1] += not got
            continue
        hits[q["cls"]][0] += 1
        hits[q["cls"]][1] += any(i in q["relevant"] for i in got[:5])
    n = sum(h[0] for h in hits.values())
    found = sum(h[1] for h in hits.values())
    per = " ".join(f"{c} {hits[c][1] / max(hits[c][0], 1):.3f}" for c in CLASSES)
    print(f"{label:10s} R@5 {found / n:.3f} | {per} | none answered with nothing {none[1]}/{none[0]}")


kw = {}
if len(sys.argv) > 3:
    kw = dict(floor_with_words=float(sys.argv[2]), lexical_weight=float(sys.argv[3]))
table(lambda q: [i for i, _ in q["hybrid"]], "real")
table(lambda q: fuse(q, **kw), "replayed")
