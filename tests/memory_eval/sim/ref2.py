from base import *
REF = [r for r in D if r['name']=='reference'][0]
RUNS = [r for r in D if r['name']!='reference']
D[:] = RUNS
for run in D:
    for q in run['queries']:
        q['pv'] = np.array(q['pvec'], dtype=np.float32)
def zcal(run, q, vec='v', own=True, refonly=False):
    v = q[vec]; rc = REF['R'] @ v; cos = run['R'] @ v; z = np.zeros(len(run['ids']))
    for s in (0,1):
        xs = [rc[REF['S']==s]]
        if own and not refonly: xs.append(cos[run['S']==s])
        allx = np.concatenate(xs); mu, sd = allx.mean(), allx.std()
        z[run['S']==s] = (cos[run['S']==s]-mu)/sd
    return z
def mk(floor=-99, lw=0.0, vec='v', own=True, mix=None):
    def f(run,q):
        z = zcal(run,q,vec,own)
        if mix: z = (1-mix)*z + mix*zcal(run,q,'pv',own)
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= floor or (lw>0 and run['ids'][i] in bm)]
        return [run['ids'][i] for i in o][:10]
    return f
if __name__=='__main__':
    report({'dense':dense,'hybrid':hybrid,'zq':mk(),'zp':mk(vec='pv'),'zmix':mk(mix=0.5),'zq-l.3':mk(lw=0.3),'zq-ref':mk(own=False)})
