from hub import *
def zall(run,q):
    v=q['v']; rc=RR@v; cos=run['R']@v; z=np.zeros(len(cos)); refmax=np.zeros(len(cos))
    for s in (0,1):
        m=run['S']==s; mu=rc[RS==s].mean(); sd=rc[RS==s].std()
        z[m]=(cos[m]-mu)/sd
        refmax[m]=((rc[RS==s]-mu)/sd).max()
    return z, refmax
def mkr(margin=0.0, lw=0.3, evt=0.0):
    def f(run,q):
        z,rm = zall(run,q); n=max(len(run['ids']),2)
        fl = rm + margin + evt*(math.sqrt(2*math.log(n)) - math.sqrt(2*math.log(36)))
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= fl[i] or (run['ids'][i] in bm and z[i] >= 0)]
        return [run['ids'][i] for i in o][:10]
    return f
tun=[r for r in D if r['name']=='tuning'][0]
for e in (0.0,0.5,1.0):
  for m in (-1.0,-0.5,0.0,0.5):
    t,none,_=evaluate(tun,mkr(m,0.3,e)); n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values()); print(e,m, round(h/n,3), none)
report({'dense':dense,'hybrid':hybrid,'evt3':mke(3.0),'r0':mkr(0.0),'r-.5':mkr(-0.5),'r0e.5':mkr(0,0.3,0.5),'r-.5e1':mkr(-0.5,0.3,1.0)})
