#!/usr/bin/env bash
# Parse memory and LogGP run time of a large GOAL trace, ReduceLab's loggp against LogGOPSim
# (txt2bin + LogGOPSim -f) on the same file, runs interleaved.
#
#   scripts/goal-bench.sh LOGGOPSIM_BUILD_DIR [--ranks 1415] [--runs 3] [--dir /tmp/goal-bench]
#
# LOGGOPSIM_BUILD_DIR holds the txt2bin and LogGOPSim binaries (scripts/loggopsim-compare.sh
# --keep DIR builds them in DIR/lgs-src/LogGOPSim). The trace is a ring allreduce written by this
# script (rank r sends to r+1 and receives from r−1 in 2(P−1) steps tagged by step, each step's
# send requiring the previous receive, a 100 ns calc after each of the first P−1 receives):
# 5·P·(P−1) operations, 10,004,050 for P = 1415. Reports peak RSS (/usr/bin/time -v) and wall time
# of each tool, and the load average before and after.
set -euo pipefail

lgs=${1:?usage: scripts/goal-bench.sh LOGGOPSIM_BUILD_DIR [--ranks P] [--runs N] [--dir DIR]}
shift
ranks=1415
runs=3
dir=/tmp/goal-bench
while [[ $# -gt 0 ]]; do
    case "$1" in
        --ranks) ranks=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
goal="$dir/ring-$ranks.goal"
if [[ ! -s "$goal" ]]; then
    python3 - "$ranks" "$goal" <<'PY'
import sys
p, out = int(sys.argv[1]), sys.argv[2]
with open(out, "w", buffering=1 << 22) as f:
    w = f.write
    w(f"num_ranks {p}\n")
    steps = 2 * (p - 1)
    for r in range(p):
        nxt, prv = (r + 1) % p, (r - 1) % p
        w(f"rank {r} {{\n")
        for k in range(steps):
            w(f"s{k}: send 4096b to {nxt} tag {k}\nr{k}: recv 4096b from {prv} tag {k}\n")
            if k < p - 1:
                w(f"c{k}: calc 100\nc{k} requires r{k}\n")
            if k > 0:
                w(f"s{k} requires {'c' if k - 1 < p - 1 else 'r'}{k - 1}\n")
        w("}\n")
PY
fi
(cd "$repo" && cargo build --release -q -p reducelab-goal --example loggp)
loggp="${CARGO_TARGET_DIR:-$repo/target}/release/examples/loggp"

measure() { # label command... → "label: wall s, peak RSS MiB" and the command's stdout in $dir/out
    /usr/bin/time -v "${@:2}" >"$dir/out" 2>"$dir/time"
    local wall rss
    wall=$(sed -n 's/.*Elapsed (wall clock) time.*: //p' "$dir/time")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time")
    printf '%-34s wall %10s  peak RSS %7d MiB\n' "$1" "$wall" $((rss / 1024))
}

echo "trace: $goal ($(du -m "$goal" | cut -f1) MiB)"
echo "load before: $(uptime)"
measure "loggp --parse-only" "$loggp" "$goal" --parse-only
cat "$dir/out"
for i in $(seq "$runs"); do
    measure "run $i: loggp (parse+check+LogGP)" "$loggp" "$goal" --timing
    grep '^Maximum' "$dir/out"
    grep '^parse' "$dir/time" || true
    measure "run $i: txt2bin" "$lgs/txt2bin" -i "$goal" -o "$dir/ring.bin"
    measure "run $i: LogGOPSim -f" "$lgs/LogGOPSim" -f "$dir/ring.bin"
    grep -E '^Maximum|^PERFORMANCE' "$dir/out"
    rm -f "$dir/ring.bin"
done
echo "load after: $(uptime)"
