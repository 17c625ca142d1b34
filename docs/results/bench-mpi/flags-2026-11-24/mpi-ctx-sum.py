import sys, glob, re, csv, statistics, collections
d=sys.argv[1]
for f in sorted(glob.glob(d+'/r*-*.csv')):
    m=re.search(r'r(\d+)-(\w+)-(\d+)\.csv',f); R,b,i=m.groups()
    t=collections.defaultdict(list)
    for rec in csv.DictReader(open(f)): t[int(rec['bytes'])].append(float(rec['seconds']))
    U=S=V=I=0
    for g in glob.glob(f"{d}/t-{R}-{b}-{i}.*"):
        u,s,v,c=open(g).read().split()[-4:]; U+=float(u); S+=float(s); V+=int(v); I+=int(c)
    med={k: round(statistics.median(v)*1e3,2) for k,v in t.items()}
    print(f"{R} ranks {b} {i}: auto median ms {med}; all ranks: user {U:.2f} s sys {S:.2f} s, voluntary {V}, involuntary {I}")
