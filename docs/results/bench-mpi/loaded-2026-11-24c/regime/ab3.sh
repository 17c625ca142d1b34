#!/bin/bash
out=$1; rounds=$2; ranks=$3; sizes=$4; reps=$5; shift 5
mkdir -p $out
B=/work/wt-shm-regime/mpi/build/bench_mpi
for i in $(seq 1 $rounds); do
  for v in "$@"; do
    case $v in old) L=/tmp/shm-old/mpi/build;; new) L=/work/wt-shm-regime/mpi/build;; hyb) L=/tmp/shm-hyb/mpi/build;; fix) L=/tmp/shm-fix/mpi/build;; esac
    echo "$v $i start $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    LD_LIBRARY_PATH=$L nice -n 10 mpirun --allow-run-as-root --oversubscribe -np $ranks -x LD_LIBRARY_PATH $B --sizes $sizes --algorithms mpi,auto --reps $reps > $out/$v$i.csv 2>$out/$v$i.err
  done
done
