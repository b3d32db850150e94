from grid import *
def mke(f263=3.0, lw=0.3):
    def f(run,q):
        z = zcal(run,q,own=False); n=max(len(run['ids']),2)
        fl = f263*math.sqrt(math.log(n)/math.log(263))
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= fl or (run['ids'][i] in bm and z[i] >= 0)]
        return [run['ids'][i] for i in o][:10]
    return f
tun=[r for r in D if r['name']=='tuning'][0]
for f in (2.5,2.75,3.0,3.25,3.5):
    t,none,_=evaluate(tun,mke(f)); n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values()); print(f, h/n, none)
report({'dense':dense,'hybrid':hybrid,'new':mkg(3.0,0.0,0.3),'evt3':mke(3.0),'evt3.5':mke(3.5)})
