#!/bin/bash
# usage: mpi-var.sh OUTDIR RANKS TAG SIZES [mpirun -x args]: the new build with settings
out=$1; R=$2; tag=$3; S=$4; shift 4
mkdir -p $out
exe=/work/wt-s18-mpi/mpi/build/bench_mpi
[ "${OLD:-0}" = 1 ] && exe=/tmp/mpi-old/mpi/build/bench_mpi
echo "$tag start $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
mpirun --allow-run-as-root --oversubscribe -np $R -x PLACE=${PLACE:-free} "$@" /tmp/mpi-place.sh /bin/sh -c "/usr/bin/time -f '%U %S %w %c' -o $out/t-$R-$tag.\$OMPI_COMM_WORLD_RANK $exe --sizes $S --algorithms ${ALGS:-auto} --reps 10 --round-bytes 67108864" > $out/r$R-$tag.csv 2>$out/r$R-$tag.err
echo "$tag end $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
