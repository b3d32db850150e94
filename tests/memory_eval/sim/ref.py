from base import *
first = D[0]; second = D[4]
def refset(run):
    return (second if run['name'] in ('tuning','held-out') else first)
def zref(run, q, refw=1.0, own=True):
    ref = refset(run); rc = ref['R'] @ q['v']; z = np.zeros(len(run['ids']))
    for s in (0,1):
        xs = [rc[ref['S']==s]]
        if own: xs.append(q['cos'][run['S']==s])
        allx = np.concatenate(xs)
        mu, sd = allx.mean(), allx.std()
        z[run['S']==s] = (q['cos'][run['S']==s]-mu)/sd
    return z
def mk(floor=2.0, lw=0.0, own=True, k=10):
    def f(run,q):
        z = zref(run,q,own=own)
        bm = dict(q['bm25']); best = max(bm.values()) if bm else 1
        sc = z + np.array([lw*bm.get(i,0)/best for i in run['ids']])
        o = [i for i in np.argsort(-sc) if z[i] >= floor or run['ids'][i] in bm and lw>0]
        return [run['ids'][i] for i in o][:k]
    return f
if __name__=='__main__':
    report({'dense':dense,'hybrid':hybrid,'z0':mk(-99),'z1.5':mk(1.5),'z2':mk(2.0),'z2.5':mk(2.5),'z2l.5':mk(2.0,0.5)})
    # per-query detail on small-4
    run=D[5]
    for q in run['queries']:
        print(q['query'], np.round(zref(run,q),2), np.round(q['cos'],3))
