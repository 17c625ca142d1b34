#!/usr/bin/env bash
# Runs ReduceLab's NDP and csg-htsim's htsim_ndp on the same connection matrix and prints the
# comparison (docs/engine.md, "Validation against htsim"). Fetches and builds nothing: build
# htsim yourself (see docs/engine.md) and build the runner with
#   cargo build --release -p reducelab-sim --example run_scenario
# Usage: scripts/htsim-compare.sh HTSIM_SIM_DIR WORK_DIR [permutation|incast] [ROUTING] [SPRAY]
#   HTSIM_SIM_DIR: htsim's sim/ directory, with datacenter/htsim_ndp built
#   WORK_DIR: where the connection matrix, scenario and outputs go (created)
#   ROUTING: ReduceLab's network.routing (adaptive by default)
#   SPRAY: ReduceLab's network.spray, flow (default) or packet (per-packet paths, as htsim's
#     sources choose them)
#   HTSIM_OUT (environment, optional): an htsim stdout of the same case to reuse instead of
#     running htsim again
set -euo pipefail
sim=${1:?usage: htsim-compare.sh HTSIM_SIM_DIR WORK_DIR [permutation|incast] [ROUTING] [SPRAY]}
work=${2:?usage: htsim-compare.sh HTSIM_SIM_DIR WORK_DIR [permutation|incast] [ROUTING] [SPRAY]}
case=${3:-permutation}
routing=${4:-adaptive}
spray=${5:-flow}
here=$(cd "$(dirname "$0")/.." && pwd)
rl=${REDUCELAB_RUNNER:-$here/target/release/examples/run_scenario}
htsim=$sim/datacenter/htsim_ndp
[ -x "$htsim" ] || { echo "error: HTSIM_SIM_DIR: no executable $htsim" >&2; exit 2; }
[ -x "$rl" ] || { echo "error: no $rl (cargo build --release -p reducelab-sim --example run_scenario)" >&2; exit 2; }
mkdir -p "$work"
cd "$work"
case $case in
permutation)
    # htsim's own generator: 1024 hosts, 1024 flows of 2 MB, all starting at 0, seed 13
    python3 "$sim/datacenter/connection_matrices/gen_permutation.py" perm.cm 1024 1024 2000000 0 13 >/dev/null
    cm=perm.cm; end=1500 ;;
incast)
    # 32 senders spread over the tree (host 1 on the receiver's edge switch, hosts 32, 64, ...,
    # 992 in its pod and in other pods) send 1 MB each to host 0
    python3 - <<'EOF'
senders = [1] + [32 * i for i in range(1, 32)]
with open("incast.cm", "w") as f:
    print("Nodes 1024", file=f)
    print("Connections", len(senders), file=f)
    for n, s in enumerate(senders):
        print(f"{s}->0 id {n + 1} start 0 size 1000000", file=f)
EOF
    cm=incast.cm; end=8000 ;;
*) echo "error: case must be permutation or incast, got $case" >&2; exit 2 ;;
esac
# 8 data packets of 4000 B payload + 64 B header per queue on both: htsim's -q counts 4000 B
# (its queue is q x 4000 bytes and admits a 4064 B packet only if it fits), so -q 9 holds 8.
if [ -n "${HTSIM_OUT:-}" ]; then
    cp "$HTSIM_OUT" htsim.out
else
    "$htsim" -tm $cm -strat ecmp -paths 256 -nodes 1024 -conns $(sed -n 's/^Connections //p' $cm) \
        -linkspeed 100000 -q 9 -cwnd 50 -mtu 4000 -end $end -logtime 1 -o htsim.log > htsim.out
fi
python3 "$here/scripts/htsim_compare.py" scenario $cm rl.toml --routing "$routing" --spray "$spray"
"$rl" rl.toml rl_out > rl.table 2> rl.err
python3 "$here/scripts/htsim_compare.py" stats $cm htsim.out rl_out --label "ReduceLab ($routing, $spray)"
