"""Per call (max over ranks): time, by placement of the 4 ranks at the call's start
(one CPU = all four ranks on one CPU; spread = otherwise), per build."""
import sys,glob,statistics,collections
res=collections.defaultdict(list)
for d in sys.argv[1:]:
    build=d.split('/')[2]+'-'+('old' if '/old' in d else 'new')
    fs=sorted(glob.glob(d+'/*.txt'))
    for size in (4194304,8388608):
        R=[[list(map(int,l.split())) for l in open(f) if int(l.split()[2])*4==size] for f in fs]
        n=min(map(len,R))
        for i in range(n):
            cpus={r[i][3] for r in R}
            pl='one CPU' if len(cpus)==1 else 'spread'
            t=max(r[i][1]-r[i][0] for r in R)/1e6
            y=statistics.median(r[i][6] for r in R)
            s=sum(r[i][7] for r in R)
            res[(build,size>>20,pl)].append((t,y,s))
print('build size placement calls median_ms median_yields_per_rank mean_futex_sleeps_all_ranks')
for k in sorted(res):
    v=res[k]
    print(k[0],'%dMiB'%k[1],k[2].replace(' ','_'),len(v),'%.1f'%statistics.median(x[0] for x in v),'%.0f'%statistics.median(x[1] for x in v),'%.1f'%(sum(x[2] for x in v)/len(v)))
