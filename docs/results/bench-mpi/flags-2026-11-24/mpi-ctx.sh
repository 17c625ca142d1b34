#!/bin/bash
# usage: mpi-ctx.sh OUTDIR RANKS PAIRS SIZES ; per rank: user s, sys s, voluntary and involuntary context switches
out=$1; R=$2; N=$3; S=$4
mkdir -p $out
for i in $(seq 1 $N); do
  for b in old new; do
    if [ $b = old ]; then exe=/tmp/mpi-old/mpi/build/bench_mpi; else exe=/work/wt-s18-mpi/mpi/build/bench_mpi; fi
    echo "$b $i start $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    mpirun --allow-run-as-root --oversubscribe -np $R -x PLACE=${PLACE:-free} /tmp/mpi-place.sh /bin/sh -c "/usr/bin/time -f '%U %S %w %c' -o $out/t-$R-$b-$i.\$OMPI_COMM_WORLD_RANK $exe --sizes $S --algorithms auto --reps 10 --round-bytes 67108864" > $out/r$R-$b-$i.csv 2>$out/r$R-$b-$i.err
    echo "$b $i end $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
  done
done
