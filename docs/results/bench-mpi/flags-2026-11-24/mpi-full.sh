#!/bin/bash
cd /work/wt-s18-mpi
out=${OUT:-/tmp/mpi-ab/full}
for i in ${PAIRS:-1 2 3}; do
  for b in old new; do
    if [ $b = old ]; then bd=/tmp/mpi-old/mpi/build; else bd=/work/wt-s18-mpi/mpi/build; fi
    echo "$b $i start $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/load.txt
    REDUCELAB_MPI_BUILD=$bd .venv/bin/reducelab bench mpi ${RANKSARG:---ranks 4 --ranks 8} --algorithm mpi --algorithm auto --reps 5 --out $out/$b-$i > $out/$b-$i.log 2>&1
    echo "$b $i end $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" >> $out/load.txt
  done
done
echo ALLDONE >> $out/load.txt
