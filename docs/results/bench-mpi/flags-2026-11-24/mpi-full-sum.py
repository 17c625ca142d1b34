import csv, sys, glob, collections, re
d=sys.argv[1]
runs=collections.defaultdict(dict)
for f in sorted(glob.glob(d+'/*-*/mpi-bench.csv')):
    tag=f.split('/')[-2]
    for r in csv.DictReader(open(f)):
        runs[tag][(int(r['ranks']),r['algorithm'],int(r['bytes']))]=float(r['median_s'])
def fmt(s): return f"{s>>20} MiB" if s>=1<<20 else f"{s>>10} KiB" if s>=1024 else f"{s} B"
tags=sorted(runs, key=lambda t:(t.split('-')[1], t.split('-')[0]!='old'))
for R in sorted({k[0] for t in runs for k in runs[t]}):
    print(f"\n**{R} ranks** (library/auto; runs in launch order: " + ", ".join(tags)+")\n")
    print("| size | " + " | ".join(tags) + " |"); print("|---"*(len(tags)+1)+"|")
    sizes=sorted({k[2] for t in runs for k in runs[t] if k[0]==R})
    for s in sizes:
        cells=[]
        for t in tags:
            a=runs[t].get((R,'auto',s)); m=runs[t].get((R,'mpi',s))
            cells.append(f"{m/a:.2f}" if a and m else "-")
        print(f"| {fmt(s)} | "+" | ".join(cells)+" |")
print()
for b in ('old','new'):
    n=b1=b13=n13=0; low=[]
    for t in tags:
        if not t.startswith(b): continue
        for (R,a,s),v in runs[t].items():
            if a!='auto' or (R,'mpi',s) not in runs[t]: continue
            r=runs[t][(R,'mpi',s)]/v; n+=1; b1+=r<1.0
            if s>=16384: n13+=1; b13+=r<1.3
            if r<1.0 or (s>=16384 and r<1.3): low.append(f"{t} {R}r {fmt(s)} {r:.2f}")
    print(f"{b}: {n} cells, {b1} below 1.0; from 16 KiB {n13} cells, {b13} below 1.3: {low}")
