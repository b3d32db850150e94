from base import *
for run in D:
    print("==", run['name'])
    pair = collections.defaultdict(list); rel = collections.defaultdict(list); nonemax=[]
    for q in run['queries']:
        for i,c in enumerate(q['cos']):
            k=(q['s'],run['S'][i])
            if run['ids'][i] in q['relevant']: rel[k].append(c)
            else: pair[k].append(c)
        if q['cls']=='none':
            nonemax.append((round(float(q['cos'].max()),3), q['query'][:40]))
    for k in sorted(pair):
        a=np.array(pair[k]); r=np.array(rel[k]) if rel[k] else np.array([np.nan])
        print(f"  q{k[0]}->r{k[1]}: irrel mean {a.mean():.3f} sd {a.std():.3f} | rel n={len(rel[k])} mean {np.nanmean(r):.3f} min {np.nanmin(r):.3f}")
    print("  none max:", nonemax)
