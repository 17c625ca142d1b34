import sys, glob, re, csv, statistics, collections
d=sys.argv[1]
for f in sorted(glob.glob(d+'/r*.csv')):
    m=re.search(r'r(\d+)-(.+)\.csv',f); R,tag=m.groups()
    t=collections.defaultdict(list)
    for rec in csv.DictReader(open(f)): t[(rec['algorithm'],int(rec['bytes']))].append(float(rec['seconds']))
    U=S=V=I=0
    for g in glob.glob(f"{d}/t-{R}-{tag}.*"):
        u,s,v,c=open(g).read().split()[-4:]; U+=float(u); S+=float(s); V+=int(v); I+=int(c)
    med={f"{a}@{k>>10}K": round(statistics.median(v)*1e3,2) for (a,k),v in t.items()}
    print(f"{R} {tag}: ms {med}; user {U:.2f} sys {S:.2f} vol {V} invol {I}")
