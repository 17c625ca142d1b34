import csv, sys, glob, statistics, re, collections
d = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(d + '/r*-*.csv')):
    m = re.search(r'r(\d+)-(old|new)-(\d+)\.csv', f); R, b, i = m.group(1), m.group(2), int(m.group(3))
    t = collections.defaultdict(list)
    for rec in csv.DictReader(open(f)):
        t[(rec['algorithm'], int(rec['bytes']))].append(float(rec['seconds']))
    for (a, s), v in t.items():
        rows[(R, b, i)][(a, s)] = statistics.median(v)
def fmt(s):
    return f"{s>>20} MiB" if s >= 1<<20 else f"{s>>10} KiB" if s >= 1024 else f"{s} B"
for R in sorted({k[0] for k in rows}, key=int):
    sizes = sorted({s for k in rows if k[0]==R for (a, s) in rows[k]})
    print(f"## {R} ranks: library/auto per launch (auto ms)")
    below1 = {'old':0,'new':0}; below13 = {'old':0,'new':0}; n={'old':0,'new':0}
    for s in sizes:
        line = [fmt(s)]
        for b in ('old','new'):
            cells=[]
            for k in sorted(k for k in rows if k[0]==R and k[1]==b):
                r = rows[k]
                if ('auto', s) in r and ('mpi', s) in r:
                    ratio = r[('mpi', s)]/r[('auto', s)]
                    cells.append(f"{ratio:.2f} ({r[('auto', s)]*1e3:.2f})")
                    n[b]+=1; below1[b]+= ratio<1.0; below13[b]+= ratio<1.3
            line.append(b+': '+' / '.join(cells))
        print(' | '.join(line))
    for b in ('old','new'):
        print(f"{b}: {n[b]} cells, {below1[b]} below 1.0, {below13[b]} below 1.3")
