import json, math, collections, sys
import numpy as np
D = json.load(open('/tmp/memory_runs_dump3.json'))
CLASSES = ["exact","synonym","paraphrase","crosslingual","typo","newest"]
def script(text):
    cjk = letters = 0
    for c in text:
        if c.isalnum():
            letters += 1; o = ord(c)
            cjk += any(a <= o <= b for a, b in [(0x3040,0x30FF),(0x3400,0x4DBF),(0x4E00,0x9FFF)])
    return 1 if cjk*4 >= max(letters,1) else 0
for run in D:
    run['ids'] = [r['id'] for r in run['records']]
    run['R'] = np.array([r['vec'] for r in run['records']], dtype=np.float32)
    run['S'] = np.array([script(r['content']) for r in run['records']])
    for q in run['queries']:
        q['v'] = np.array(q['vec'], dtype=np.float32)
        q['s'] = script(q['query'])
        q['cos'] = run['R'] @ q['v']
def evaluate(run, ranker):
    tab = collections.defaultdict(lambda: [0,0]); none=[0,0]; misses=[]
    for q in run['queries']:
        got = ranker(run, q)
        if q['cls']=='none':
            none[0]+=1; none[1]+= (len(got)==0); continue
        rk = next((i for i,x in enumerate(got) if x in q['relevant']), None)
        t = tab[q['cls']]; t[0]+=1; t[1]+= (rk is not None and rk<5)
        if not (rk is not None and rk<5): misses.append((q['cls'], q['query']))
    return tab, none, misses
def report(rankers, runs=None, show_miss=None):
    for run in D:
        if runs and run['name'] not in runs: continue
        res = {n: evaluate(run, f) for n,f in rankers.items()}
        print(f"== {run['name']} ({len(run['records'])} rec, {len(run['queries'])} q)")
        print("  %-13s %4s" % ('class','n') + ''.join(f" {n:>9}" for n in rankers))
        for c in CLASSES+['all']:
            def val(t):
                if c=='all':
                    n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values())
                else:
                    n,h = t.get(c,[0,0])
                return n, (h/n if n else float('nan'))
            n = val(res[list(rankers)[0]][0])[0]
            if n==0: continue
            print("  %-13s %4d" % (c,n) + ''.join(f" {val(res[k][0])[1]:9.3f}" for k in rankers))
        print("  %-13s %4d" % ('none-empty', res[list(rankers)[0]][1][0]) + ''.join(f" {res[k][1][1]/max(res[k][1][0],1):9.3f}" for k in rankers))
        if show_miss:
            for m in res[show_miss][2]: print("    miss", m)
def hybrid(run,q): return q['hybrid']
def dense(run,q):
    c=q['cos']; S=run['S']; sc=c.copy()
    for s in (0,1):
        m=S==s
        if m.any(): sc[m]-=c[m].mean()
    o=np.argsort(-sc)[:10]; return [run['ids'][i] for i in o]
def lexical(run,q): return [i for i,_ in q['bm25']][:10]
if __name__=='__main__':
    report({'lexical':lexical,'dense':dense,'hybrid':hybrid})
