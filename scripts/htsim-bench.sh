#!/usr/bin/env bash
# The benchmark against htsim: ReduceLab's `ndp-permutation-SIZE` engine benchmark and csg-htsim's
# htsim_ndp (-strat perm, the same path choice) on the same pairs, interleaved, with wall time,
# user CPU time (what counts on a loaded machine), peak RSS and the load average
# (docs/engine.md, "Performance"). Fetches and builds nothing:
# build htsim's sim/ (see docs/engine.md) and
#   cargo build --release -p reducelab-sim --example bench_engine --example run_scenario
# Usage: scripts/htsim-bench.sh HTSIM_SIM_DIR WORK_DIR SIZE RUNS [HTSIM_RUNS]
#   SIZE: 1k, 8k or 27k (scenarios/bench/ndp_permutation_SIZE.toml)
#   RUNS: ReduceLab runs; HTSIM_RUNS (default RUNS): htsim runs, interleaved with the first ones
set -euo pipefail
sim=${1:?usage: htsim-bench.sh HTSIM_SIM_DIR WORK_DIR SIZE RUNS [HTSIM_RUNS]}
work=${2:?usage}; size=${3:?usage}; runs=${4:?usage}; hruns=${5:-$runs}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/target/release/examples
sc=$here/scenarios/bench/ndp_permutation_$size.toml
[ -f "$sc" ] || { echo "error: SIZE: no $sc" >&2; exit 2; }
[ -x "$bin/bench_engine" ] && [ -x "$bin/run_scenario" ] || { echo "error: build bench_engine and run_scenario first" >&2; exit 2; }
[ "$hruns" = 0 ] || [ -x "$sim/datacenter/htsim_ndp" ] || { echo "error: HTSIM_SIM_DIR: no $sim/datacenter/htsim_ndp" >&2; exit 2; }
mkdir -p "$work"
cd "$work"
# The same pairs for htsim: the scenario's permutation depends on the seed and the hosts, not
# on the size, so a one-packet copy of it gives them quickly.
sed 's/^bytes = 2000000$/bytes = 4000/' "$sc" > pairs.toml
"$bin/run_scenario" pairs.toml pairs_out > /dev/null 2>&1
python3 "$here/scripts/htsim_compare.py" cm pairs_out perm.cm
sed -i 's/size 4000$/size 2000000/' perm.cm
n=$(sed -n 's/^Nodes //p' perm.cm)
echo "load before: $(uptime)"
for i in $(seq 1 "$runs"); do
    ours=$(nice -n 10 /usr/bin/time -f "%U" -o ours_time.txt "$bin/bench_engine" "ndp-permutation-$size")
    echo "reducelab $i: $ours  user $(tail -1 ours_time.txt) s"
    if [ "$i" -le "$hruns" ]; then
        nice -n 10 /usr/bin/time -f "%e s %M KB %U" -o htsim_time.txt "$sim/datacenter/htsim_ndp" -tm perm.cm \
            -strat perm -paths 256 -nodes "$n" -conns "$n" -linkspeed 100000 -q 9 -cwnd 50 -mtu 4000 \
            -end 1500 -logtime 1 -o htsim.log > htsim.out 2>&1
        echo "htsim $i: wall $(cut -d' ' -f1-2 htsim_time.txt)  user $(cut -d' ' -f5 htsim_time.txt) s  peak RSS $(( $(cut -d' ' -f3 htsim_time.txt) / 1024 )) MiB  flows finished $(grep -c '^Flow ndp_' htsim.out)/$n"
    fi
    echo "load: $(uptime)"
done
