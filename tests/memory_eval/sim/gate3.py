from ref2 import *
import sys
own = False
allrel=[]; allnone=[]
for run in D:
    rel=[];none=[]
    for q in run['queries']:
        z = zcal(run,q,own=own); o=np.sort(z)[::-1]
        if q['cls']=='none': none.append(round(float(o[0]),2)); continue
        ri=[i for i,x in enumerate(run['ids']) if x in q['relevant']]
        if not ri: continue
        zr=max(z[i] for i in ri); rel.append(round(float(zr),2))
        if run['name']=='small-4': print('  small-4', q['query'], np.round(z,2))
    rel.sort(); allrel+=rel; allnone+=none
    print(run['name'], 'none', sorted(none), '\n   rel z quantiles', [rel[int(len(rel)*p)] for p in (0,.05,.1,.2,.3,.5)], 'n', len(rel))
for t in (1.5,2,2.5,3,3.5,4):
    print(t, 'rel kept %.3f'%np.mean(np.array(allrel)>=t), 'none dropped %.3f'%np.mean(np.array(allnone)<t))
