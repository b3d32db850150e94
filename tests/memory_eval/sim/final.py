from grid import *
report({'lexical':lexical,'dense':dense,'hybrid':hybrid,'new':mkg(3.0,0.0,0.3), 'new2.5':mkg(2.5,0.0,0.3)}, show_miss='new')
run=[r for r in D if r['name']=='small-4'][0]
for q in run['queries']:
    print(q['query'], mkg(3.0,0.0,0.3)(run,q)[:2], q['relevant'])
