"""Check that every `paraphrase` query of queries.jsonl, and every `paraphrase` and
`crosslingual` query of tuning_queries.jsonl (the tuning half's own queries), shares no
content word with the memories it should find, and that the latter are about the tuning
half's topics (held_out.txt): English words (lowercased, light stemming, stop words removed) and
Chinese words (any two adjacent Han characters, question particles removed). Exit 1 listing
the offenders. Run by tests/memory_quality.rs when python3 is present, and by hand:
    python3 tests/memory_eval/check_paraphrase.py"""
import json, os, re, sys

STOP = set("""a an the of to in on at for by with from and or not no is are was were be been it its
this that these those what which who whom how why when where do does did can could should would
will shall may might must i me my we our you your he she his her they them their lin lin's
there here than then so if as about into over after before up out get got now new one""".split())
ZH_STOP = {"什么", "怎么", "为什", "么回", "回事", "哪些", "哪里", "时候", "怎样", "是怎", "么办", "可以", "吗", "的"}

def stem(w):
    for suf in ("ing", "ed", "es", "s", "ly"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w

def words(text):
    en = {stem(w) for w in re.findall(r"[a-z0-9][a-z0-9@.'-]*[a-z0-9]|[a-z0-9]", text.lower()) if w not in STOP}
    zh = set()
    for run in re.findall(r"[\u4e00-\u9fff]+", text):
        zh.update(run[i:i + 2] for i in range(len(run) - 1))
    return en | (zh - ZH_STOP)

here = os.path.dirname(os.path.abspath(__file__))
memories = {m["key"]: m for m in map(json.loads, open(os.path.join(here, "memories.jsonl")))}
held = [l.strip() for l in open(os.path.join(here, "held_out.txt")) if l.strip() and not l.startswith("#")]

def topic(key):  # as tests/common/memory_eval.rs
    key = key[3:] if key.startswith("zh-") else key
    head, _, n = key.rpartition("-")
    if head and n.isdigit():
        key = head
    parts = key.split("-")
    return "-".join(parts[: 2 if parts[0] == "pref" else 1])

bad = []
checked = [(q, ("paraphrase",)) for q in map(json.loads, open(os.path.join(here, "queries.jsonl")))]
for q in map(json.loads, open(os.path.join(here, "tuning_queries.jsonl"))):
    checked.append((q, ("paraphrase", "crosslingual")))
    bad.extend(f"{q['query']!r}: {k} is a held-out topic" for k in q["relevant"] if topic(k) in held)
for q, classes in checked:
    if q["cls"] not in classes:
        continue
    for k in q["relevant"]:
        shared = words(q["query"]) & words(memories[k]["content"])
        if shared:
            bad.append(f"{q['query']!r} shares {sorted(shared)} with {k}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("paraphrase (and the tuning half's own cross-lingual) queries share no content word with their memories")
