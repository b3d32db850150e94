from fuse import *
W=float(sys.argv[2]) if len(sys.argv)>2 else 20
for name in ["tuning","small-4","embed-4","recall-5","recall-indent"]:
    run=RUNS[name]; print("==",name)
    rows=[]
    for q in run["queries"]:
        z=crowd_z(run,q,W); o=np.argsort(-z)
        rel=[i for i,x in enumerate(run["ids"]) if x in q["relevant"]]
        zr=max([z[i] for i in rel],default=float('nan'))
        rank=min([list(o).index(i) for i in rel],default=-1)
        rows.append((q["cls"], round(float(z[o[0]]),2), round(float(z[o[1]]),2) if len(o)>1 else 0, round(float(zr),2), rank, bool(q["wbm25"]), q["query"][:45]))
    rows.sort(key=lambda r:(r[0]!='none', r[3] if r[0]!='none' else r[1]))
    for r in rows: print("  %-12s top %5.2f 2nd %5.2f rel %5.2f rank %3d lex %d %s"%r)
