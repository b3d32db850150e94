from refmax import *
def mkn(f=3.0, fnw=4.5, lw=0.3):
    def g(run,q):
        z = zcal(run,q,own=False); n=max(len(run['ids']),2)
        s = math.sqrt(math.log(n)/math.log(263))
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        fl = (f if bm else fnw)*s
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= fl or (run['ids'][i] in bm and z[i] >= 0)]
        return [run['ids'][i] for i in o][:10]
    return g
tun=[r for r in D if r['name']=='tuning'][0]
for f in (2.5,3.0):
  for fnw in (3.0,4.0,4.5,5.0):
    t,none,_=evaluate(tun,mkn(f,fnw)); n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values()); print(f,fnw, round(h/n,3), none)
report({'dense':dense,'hybrid':hybrid,'evt3':mke(3.0),'n3/4.5':mkn(3.0,4.5),'n3/5':mkn(3.0,5.0),'n2.5/4.5':mkn(2.5,4.5)})
