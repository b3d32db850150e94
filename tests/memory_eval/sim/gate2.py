from ref import *
for run in D:
    rel=[];none=[]
    for q in run['queries']:
        z = zref(run,q); o=np.sort(z)[::-1]
        if q['cls']=='none': none.append((round(o[0],2), round(o[0]-o[1],2))); continue
        ri=[i for i,x in enumerate(run['ids']) if x in q['relevant']]
        if not ri: continue
        zr=max(z[i] for i in ri)
        rel.append((round(zr,2), round(zr-(o[1] if zr==o[0] else o[0]),2)))
    rel.sort()
    print(run['name'], 'none', sorted(none), '\n   rel z quantiles', [rel[int(len(rel)*p)][0] for p in (0,.05,.1,.2,.3,.5)], 'n', len(rel))
