#!/bin/bash
# usage: mpi-ab.sh OUTDIR RANKS PAIRS SIZES [extra mpirun args]
out=$1; R=$2; N=$3; S=$4; shift 4
mkdir -p $out
for i in $(seq 1 $N); do
  for b in old new; do
    if [ $b = old ]; then exe=${OLDEXE:-/tmp/mpi-old/mpi/build/bench_mpi}; else exe=${NEWEXE:-/tmp/mpi-newb/bench_mpi}; fi
    echo "$b $i start $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    mpirun --allow-run-as-root --oversubscribe -np $R -x PLACE "$@" /tmp/mpi-place.sh $exe --sizes $S --algorithms mpi,auto --reps ${REPS:-5} --round-bytes 16777216 > $out/r$R-$b-$i.csv 2>$out/r$R-$b-$i.err
    echo "$b $i end $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" >> $out/load.txt
  done
done
