import sys,glob
d=sys.argv[1]; size=int(sys.argv[2])
fs=sorted(glob.glob(d+'/*.txt'))
R=[[list(map(int,l.split())) for l in open(f) if int(l.split()[2])*4==size] for f in fs]
n=min(map(len,R))
for i in range(0,n,int(sys.argv[3]) if len(sys.argv)>3 else 1):
    print(i,''.join(str(r[i][3]) for r in R),'%.1f'%(max(r[i][1]-r[i][0] for r in R)/1e6),' '.join('%d/%d/%d'%(r[i][5],r[i][6],r[i][7]) for r in R))
