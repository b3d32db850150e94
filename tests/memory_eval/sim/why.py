from evt import *
for run in D:
    n=max(len(run['ids']),2); fl=3.0*math.sqrt(math.log(n)/math.log(263))
    for q in run['queries']:
        if q['cls']!='none': continue
        z=zcal(run,q,own=False); bm=dict(q['bm25'])
        i=int(np.argmax(z))
        lex=[(run['records'][j]['content'][:30], round(float(z[j]),2)) for j,x in enumerate(run['ids']) if x in bm]
        print(run['name'], q['query'][:30], 'floor %.2f'%fl, 'top z %.2f'%z[i], run['records'][i]['content'][:40], 'lex', lex[:3])
