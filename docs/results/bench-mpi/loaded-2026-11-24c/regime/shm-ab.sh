#!/bin/bash
# usage: shm-ab.sh OUTDIR PAIRS RANKS SIZES  -- interleaved old/new with the new bench binary
out=$1; pairs=$2; ranks=$3; sizes=$4; shift 4
mkdir -p $out
B=/work/wt-shm-regime/mpi/build/bench_mpi
for i in $(seq 1 $pairs); do
  for v in old new; do
    if [ $v = old ]; then L=/tmp/shm-old/mpi/build; else L=/work/wt-shm-regime/mpi/build; fi
    echo "$v $i start $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    LD_LIBRARY_PATH=$L nice -n 10 mpirun --allow-run-as-root --oversubscribe -np $ranks -x LD_LIBRARY_PATH "$@" $B --sizes $sizes --algorithms mpi,auto --reps 5 > $out/$v$i.csv 2>$out/$v$i.err
  done
done
