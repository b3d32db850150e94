from ref import *
rows=[]
for run in D:
    for q in run['queries']:
        z = zref(run,q)
        if q['cls']=='none':
            rows.append((float(z.max()), 'NONE', run['name'], q['query'][:50]))
        else:
            rel=[i for i,x in enumerate(run['ids']) if x in q['relevant']]
            if not rel: continue
            zr=max(z[i] for i in rel)
            rows.append((float(zr), q['cls'], run['name'], q['query'][:50]))
rows.sort()
for r in rows: print("%6.2f %-12s %-9s %s"%r)
