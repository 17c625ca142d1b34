import csv,sys,statistics,glob,os,re
d=sys.argv[1]
files=sorted(glob.glob(d+'/*.csv'),key=lambda f:(int(re.sub(r'\D','',os.path.basename(f)) or 0),f))
for f in files:
    t={}
    for r in csv.DictReader(open(f)):
        t.setdefault((r['algorithm'],int(r['bytes'])),[]).append(float(r['seconds']))
    sizes=sorted({b for a,b in t})
    cells=[]
    for b in sizes:
        m=statistics.median(t[('mpi',b)]); a=statistics.median(t[('auto',b)])
        rounds=' '.join('%.1f'%(x*1e3) for x in t[('auto',b)])
        cells.append('%dM: auto %.2fms (%s) %.2fx'%(b>>20,a*1e3,rounds,m/a))
    print(os.path.basename(f),' | '.join(cells))
