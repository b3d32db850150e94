from ref2 import *
def mkg(floor=3.0, lfloor=1.0, lw=0.3, nexp=0.0):
    def f(run,q):
        z = zcal(run,q,own=False)
        n = len(run['ids'])
        fl = floor + nexp*math.sqrt(2*math.log(n+1))
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= fl or (run['ids'][i] in bm and z[i] >= lfloor)]
        return [run['ids'][i] for i in o][:10]
    return f
import itertools
res=[]
tun=[r for r in D if r['name']=='tuning'][0]
for fl,lf,lw,ne in itertools.product([2.5,3.0,3.5,4.0],[0.0,1.0,2.0],[0.0,0.3,0.7],[0.0]):
    t,none,_=evaluate(tun,mkg(fl,lf,lw,ne))
    n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values())
    res.append((h/n, none[1]/none[0], fl,lf,lw,ne))
res.sort(key=lambda r:(-(r[0]+0.1*r[1])))
for r in res[:15]: print(r)
