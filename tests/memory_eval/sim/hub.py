from evt import *
RR = REF['R']; RS = REF['S']
def hubs(run):
    if 'hub' not in run:
        C = run['R'] @ RR.T  # rec x ref
        run['hub'] = np.stack([C[:, RS==s].mean(1) for s in (0,1)], 1)  # rec x script
        run['hubsd'] = np.stack([C[:, RS==s].std(1) for s in (0,1)], 1)
    return run['hub'], run['hubsd']
def zcsls(run, q, beta=1.0):
    v=q['v']; rc=RR@v; cos=run['R']@v; z=np.zeros(len(cos))
    h,hs = hubs(run)
    for s in (0,1):
        m=run['S']==s; mu=rc[RS==s].mean(); sd=rc[RS==s].std()
        z[m] = (cos[m]-mu-beta*(h[m,q['s']]-h[m,q['s']].mean() if False else beta*(h[m,q['s']] - rc_mean_global[s][q['s']])))/sd
    return z
# global mean ref-ref cos per (rec script, query script)
RC = RR@RR.T
rc_mean_global = {s:{t: RC[np.ix_(RS==s, RS==t)].mean() for t in (0,1)} for s in (0,1)}
def mkh(f263=3.0, lw=0.3, beta=1.0, evt=True):
    def f(run,q):
        z = zcsls(run,q,beta); n=max(len(run['ids']),2)
        fl = f263*math.sqrt(math.log(n)/math.log(263)) if evt else f263
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= fl or (run['ids'][i] in bm and z[i] >= 0)]
        return [run['ids'][i] for i in o][:10]
    return f
if __name__=='__main__':
    tun=[r for r in D if r['name']=='tuning'][0]
    for b in (0.0,0.5,1.0):
      for f in (2.0,2.5,3.0,3.5):
        t,none,_=evaluate(tun,mkh(f,0.3,b)); n=sum(v[0] for v in t.values()); h=sum(v[1] for v in t.values()); print(b,f, round(h/n,3), none)
    report({'dense':dense,'hybrid':hybrid,'evt3':mke(3.0),'h.5':mkh(3.0,0.3,0.5),'h1':mkh(3.0,0.3,1.0),'h1f2.5':mkh(2.5,0.3,1.0)})
