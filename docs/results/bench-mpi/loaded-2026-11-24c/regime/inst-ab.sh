#!/bin/bash
out=$1; pairs=$2; ranks=$3; sizes=$4; reps=$5
mkdir -p $out
B=/work/wt-shm-regime/mpi/build/bench_mpi
for i in $(seq 1 $pairs); do
  for v in old new; do
    if [ $v = old ]; then L=/tmp/shm-oinst/mpi/build; O=/tmp/shm-oinst/out; else L=/tmp/shm-inst/mpi/build; O=/tmp/shm-inst/out; fi
    rm -f $O/*.txt
    echo "$v $i start $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    LD_LIBRARY_PATH=$L nice -n 10 mpirun --allow-run-as-root --oversubscribe -np $ranks -x LD_LIBRARY_PATH $B --sizes $sizes --algorithms mpi,auto --reps $reps > $out/$v$i.csv 2>$out/$v$i.err
    mkdir -p $out/$v$i.inst; mv $O/*.txt $out/$v$i.inst/
  done
done
