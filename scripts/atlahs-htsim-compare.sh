#!/usr/bin/env bash
# ReduceLab's packet engine (GOAL traffic, NDP) against ATLAHS's htsim GOAL backend on the same GOAL files.
#
#   scripts/atlahs-htsim-compare.sh SOURCE [--ranks "8 32 128"] [--cases REGEX] [--queue-bytes Q] [--diagnose]
#                                   [--keep DIR]
#
# SOURCE is an ATLAHS checkout or a bare git directory of spcl/atlahs (e.g. the mirror
# /work/.mirror/spcl+atlahs/repo); this script never downloads anything. From it only
# sim/htsim-backend/sim and sim/LogGOPSim are taken (blob by blob from a bare directory: some
# of its large application blobs may be absent), into a temporary directory where ATLAHS's
# `htsim_ndp` and LogGOPSim's `txt2bin` are built with their own Makefiles' flags (g++ -O3).
# Needs g++, make, re2c, gengetopt, python3, ReduceLab's `reducelab` command (REDUCELAB=PATH, or
# .venv/bin/reducelab, or on PATH) for `schedule export`, and cargo for our `run_scenario`
# example (CARGO_TARGET_DIR is respected).
#
# Every case is a GOAL trace: collectives ReduceLab exports (`reducelab schedule export --format
# goal`) and scripts/make-stencil-goal.py's stencil. `txt2bin` turns it into LogGOPSim's binary
# form, and that one file is what both simulators run: ATLAHS as `htsim_ndp -goal FILE` (ATLAHS
# reads only the binary form), ReduceLab as a `goal` traffic entry (it reads both forms).
# Rank r runs on host r in both. The network is the same in both, as far as both can say it:
#   - 2-tier leaf/spine fat tree of NODES = K²/2 hosts (htsim `-tiers 2 -nodes NODES`: K leaves of
#     K/2 hosts, K/2 spines, one link from every leaf to every spine; ReduceLab `fat_tree_2` with
#     leaves = K, hosts_per_leaf = spines = K/2), host i under leaf i / (K/2) in both;
#   - 200 Gb/s links, 500 ns per link, no switch latency (ATLAHS's leaf-spine .topo files'
#     values; its GOAL loop also assumes 200 Gb/s: G = 0.04 ns/B is hard-coded);
#   - NDP with 4096 B of payload and a 64 B header per packet (htsim `-mtu 4096`, ReduceLab
#     `mtu_bytes = 4160`, `header_bytes = 64`), initial window 50 packets (ATLAHS's GOAL sources
#     fix it at 50), minimum RTO 50 ms (htsim's `main_ndp`);
#   - data queues of Q = 1,000,000 B (ATLAHS's NDP runs pass `-q 1000000`, which its `main_ndp`
#     takes in bytes; it admits a 4160 B packet while the queue holds at most Q - 4160 B, so
#     floor(Q / 4160) = 240 packets: ReduceLab `data_queue_packets = 240`); --queue-bytes Q sets
#     another Q (at least 4160), e.g. 41600 for 10 packets, small enough to trim;
#   - per-packet path spraying: htsim `-strat ecmp_host` (switches hash each packet's path id; ATLAHS
#     gives each flow 128), ReduceLab `routing = "ecmp"`, `spray = "packet"`;
#   - no host overheads (ATLAHS's htsim GOAL loop sets o = g = L = 0; `main_ndp` has no `-lgs_o`).
#
# It prints, per case and rank count: operations, htsim's maximum finishing time (ns; it prints
# integer ns), ReduceLab's makespan (`runtime_ps`, in ns), ReduceLab / htsim, the trims of each
# (htsim: its NACK count from -lgs_flow_stats; ReduceLab: summary.json's transport.trims) and the
# wall time of each. --ranks sets the rank counts (powers of two, at most 128; the stencil and
# recursive doubling need powers of two), --cases keeps the cases whose name matches the (grep -E)
# REGEX, --keep DIR keeps the build, traces, outputs and scenarios. The exit status is 1 if a run
# fails or ReduceLab's run does not end completed and verified.
#
# --diagnose also builds a second, patched copy of htsim_ndp (never ATLAHS's behaviour; for
# explaining the difference only) and adds its time ("diag ns") and ReduceLab / diag: with
# ATLAHS_RX_DONE a GOAL message completes (its send and its receive) when the receiver has every
# byte, not when the sender gets the last ACK; with ATLAHS_EXACT_LAST a message's last packet
# carries only the remaining bytes (ATLAHS's NDP source sends it full size). What differs then is
# what ReduceLab does not model: ATLAHS's loop starts a rank's sends one at a time, each after the
# previous one's (packets + 1) x 4160 B at 0.04 ns/B, where ReduceLab's NIC interleaves them.
set -euo pipefail

src=${1:?usage: scripts/atlahs-htsim-compare.sh ATLAHS_SOURCE [--ranks "8 32 128"] [--cases REGEX] [--keep DIR]}
shift
ranks="8 32 128"
only=""
keep=""
diagnose=0
queue_bytes=1000000
while [[ $# -gt 0 ]]; do
    case "$1" in
        --ranks) ranks=$2; shift 2 ;;
        --cases) only=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        --queue-bytes) queue_bytes=$2; shift 2 ;;
        --diagnose) diagnose=1; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if ! [[ $queue_bytes =~ ^[0-9]+$ ]] || (( queue_bytes < 4160 )); then
    echo "--queue-bytes: $queue_bytes is not a whole number of bytes >= 4160 (one packet)" >&2
    exit 2
fi
nodes=128
half=8 # K/2 for nodes = K²/2 = 128
for p in $ranks; do
    if (( p < 2 || p > nodes || (p & (p - 1)) != 0 )); then
        echo "--ranks: $p is not a power of two in 2..$nodes" >&2
        exit 2
    fi
done

repo=$(cd "$(dirname "$0")/.." && pwd)
reducelab=${REDUCELAB:-}
if [[ -z "$reducelab" ]]; then
    if [[ -x "$repo/.venv/bin/reducelab" ]]; then
        reducelab="$repo/.venv/bin/reducelab"
    else
        reducelab=$(command -v reducelab) || { echo "no reducelab command: set REDUCELAB=PATH" >&2; exit 2; }
    fi
fi
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

# ATLAHS sources: sim/htsim-backend/sim and sim/LogGOPSim only.
mkdir -p "$work/atlahs"
if [[ -d "$src/sim/htsim-backend/sim" ]]; then
    commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "checkout")
    cp -r "$src/sim/htsim-backend" "$src/sim/LogGOPSim" "$work/atlahs/"
else
    commit=$(git --git-dir="$src" rev-parse HEAD)
    absent=0
    while IFS= read -r -d '' line; do
        meta=${line%%$'\t'*}
        path=${line#*$'\t'}
        read -r _ type hash <<<"$meta"
        [[ $type == blob ]] || continue
        out="$work/atlahs/${path#sim/}"
        mkdir -p "$(dirname "$out")"
        if git --git-dir="$src" cat-file -e "$hash" 2>/dev/null; then
            git --git-dir="$src" cat-file blob "$hash" >"$out"
        else
            absent=$((absent + 1)) # prebuilt binaries and objects; everything is built here
        fi
    done < <(git --git-dir="$src" ls-tree -r -z HEAD -- sim/htsim-backend/sim sim/LogGOPSim)
    echo "ATLAHS $commit: $absent absent blobs skipped (prebuilt binaries)" >&2
fi
htsim_dir="$work/atlahs/htsim-backend/sim"
lgs_dir="$work/atlahs/LogGOPSim"
rm -f "$htsim_dir"/datacenter/htsim_* "$lgs_dir"/txt2bin "$lgs_dir"/*.o
(
    cd "$htsim_dir"
    make -j2 libhtsim.a
    make -C datacenter -j2 htsim_ndp
    cd "$lgs_dir"
    make txt2bin
) >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
htsim="$htsim_dir/datacenter/htsim_ndp"
txt2bin="$lgs_dir/txt2bin"

if [[ $diagnose == 1 ]]; then
    cp -a "$htsim_dir" "$work/htsim-diag"
    python3 - "$work/htsim-diag/ndp.cpp" <<'EOF'
import sys
path = sys.argv[1]
s = open(path).read()
def sub(old, new):
    global s
    if old not in s:
        sys.exit(f"--diagnose: patch anchor not found in {path}: {old[:60]!r}")
    s = s.replace(old, new, 1)
sub('#include "ndp.h"\n',
    '#include "ndp.h"\n#include <cstdlib>\n#include <unordered_set>\n'
    'static const bool atlahs_rx_done = std::getenv("ATLAHS_RX_DONE") != nullptr;\n'
    'static const bool atlahs_exact_last = std::getenv("ATLAHS_EXACT_LAST") != nullptr;\n'
    'static std::unordered_set<const void*> atlahs_rx_reported;\n')
# The sender's completion at the last ACK (the first call; the second is in dead code).
sub('            _atlahs_api->EventFinished(*flow_over);\n',
    '            if (!atlahs_rx_reported.count(this)) _atlahs_api->EventFinished(*flow_over);\n')
sub('    send_ack(ts, seqno, pacer_no, marked, pull);\n',
    '    send_ack(ts, seqno, pacer_no, marked, pull);\n'
    '    if (atlahs_rx_done && _src->_atlahs_api && _cumulative_ack >= _src->_flow_size\n'
    '        && !atlahs_rx_reported.count(_src)) {\n'
    '        atlahs_rx_reported.insert(_src);\n'
    '        EventOver *rx_over = new EventOver(_src->from, _src->to, _src->_flow_size, _src->tag,\n'
    '                                           _src->eventlist().now(), AtlahsEventType::SEND_EVENT_OVER);\n'
    '        rx_over->node = _src->lgs_node;\n'
    '        _src->_atlahs_api->EventFinished(*rx_over);\n'
    '    }\n')
sub('                p = NdpPacket::newpkt(_flow, *_route, _highest_sent+1, pacer_no,\n'
    '                                      _mss, false, _path_ids.size(),\n',
    '                p = NdpPacket::newpkt(_flow, *_route, _highest_sent+1, pacer_no,\n'
    '                                      atlahs_exact_last && last_packet ? (int)(_flow_size - _highest_sent) : _mss,\n'
    '                                      false, _path_ids.size(),\n')
open(path, "w").write(s)
EOF
    (
        cd "$work/htsim-diag"
        make -j2 libhtsim.a
        make -C datacenter -j2 htsim_ndp
    ) >"$work/build-diag.log" 2>&1 || { tail -30 "$work/build-diag.log" >&2; exit 1; }
fi

(cd "$repo" && cargo build --release -q -p reducelab-sim --example run_scenario)
run_scenario="${CARGO_TARGET_DIR:-$repo/target}/release/examples/run_scenario"

# name | generator: "export ALGORITHM COLLECTIVE SIZE" (reducelab schedule export, rank layout
# torus:P) or "stencil ITERS HALO_BYTES RESIDUAL_BYTES" (scripts/make-stencil-goal.py).
cases=(
    "ring-64KiB|export ring allreduce 64KiB"
    "ring-16MiB|export ring allreduce 16MiB"
    "recdoub-latency-1KiB|export recursive-doubling-latency allreduce 1KiB"
    "recdoub-bandwidth-4MiB|export recursive-doubling-bandwidth allreduce 4MiB"
    "pairwise-alltoall-1MiB|export pairwise alltoall 1MiB"
    "stencil-64KiB|stencil 3 65536 4096"
)

write_scenario() { # FILE GOAL_BIN
    cat >"$1" <<EOF
name = "atlahs-htsim-compare"
seed = 1

[topology]
kind = "fat_tree_2"
leaves = $((2 * half))
hosts_per_leaf = $half
spines = $half
bandwidth_gbps = 200
latency_ns = 500

[network]
mtu_bytes = 4160
header_bytes = 64
switch_latency_ns = 0
flow_control = "drop_tail"
routing = "ecmp"
spray = "packet"

[transport]
kind = "ndp"
initial_window_packets = 50
data_queue_packets = $((queue_bytes / 4160))
rto_us = 50000

[[traffic]]
kind = "goal"
file = "$2"
transport = "ndp"
EOF
}

run_htsim() { # BINARY GOAL_BIN OUT [ENV=VALUE...]
    local bin=$1 goal=$2 out=$3
    shift 3
    cp "$goal" "$goal.htsim" # htsim opens its input read-write: keep ours untouched
    env "$@" "$bin" -goal "$goal.htsim" -tiers 2 -nodes "$nodes" -linkspeed 200000 \
        -hop_latency 0.5 -switch_latency 0 -strat ecmp_host -paths 128 -mtu 4096 \
        -q "$queue_bytes" -lgs_flow_stats >"$out" 2>&1
    local rc=$?
    rm -f "$goal.htsim"
    return $rc
}
finish_ns() { sed -n 's/^Maximum finishing time at host [0-9]*: \([0-9]*\) .*/\1/p' "$1"; }

echo "ATLAHS $commit; queues $queue_bytes B ($((queue_bytes / 4160)) packets); $(uptime | sed 's/.*load average/load average/')"
header=(case ranks ops "htsim ns" "ReduceLab ns" ratio "h trims" "R trims" "h wall" "R wall")
fmt='%-24s %5s %8s %14s %14s %7s %8s %8s %8s %8s'
if [[ $diagnose == 1 ]]; then
    header+=("diag ns" "R/diag")
    fmt+=' %10s %7s'
fi
# shellcheck disable=SC2059
printf "$fmt\n" "${header[@]}"
status=0
for c in "${cases[@]}"; do
    name=${c%%|*}
    read -r gen a1 a2 a3 <<<"${c#*|}"
    if [[ -n "$only" ]] && ! grep -qE "$only" <<<"$name"; then
        continue
    fi
    for p in $ranks; do
        base="$work/$name-$p"
        if [[ $gen == export ]]; then
            "$reducelab" schedule export -a "$a1" -t "torus:$p" --collective "$a2" --size "$a3" \
                --format goal --out "$base.goal" >/dev/null 2>"$work/export.err" || { cat "$work/export.err" >&2; exit 1; }
        else
            python3 "$repo/scripts/make-stencil-goal.py" "$p" "$a1" "$a2" "$a3" >"$base.goal"
        fi
        "$txt2bin" -i "$base.goal" -o "$base.bin" >/dev/null
        t0=$(date +%s.%N)
        if ! run_htsim "$htsim" "$base.bin" "$base.htsim.out"; then
            printf '%-24s %5s htsim failed: %s\n' "$name" "$p" "$(tail -1 "$base.htsim.out")"
            status=1
            continue
        fi
        t1=$(date +%s.%N)
        write_scenario "$base.toml" "$base.bin"
        if ! "$run_scenario" "$base.toml" "$base.reducelab" >"$base.reducelab.out" 2>&1; then
            printf '%-24s %5s ReduceLab failed: %s\n' "$name" "$p" "$(tail -1 "$base.reducelab.out")"
            status=1
            continue
        fi
        t2=$(date +%s.%N)
        theirs=$(finish_ns "$base.htsim.out")
        hnacks=$(sed -n 's/^Total Number of NACKS \([0-9]*\)/\1/p' "$base.htsim.out")
        read -r ours rtrims ops rstatus < <(python3 - "$base.reducelab/summary.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["traffic"][0]
ok = d["status"] == "completed" and t["verified"]
print(f'{t["runtime_ps"] / 1000:.3f} {d["transport"]["trims"]} {t["operations"]} {"ok" if ok else d["status"]}')
EOF
        )
        if [[ -z "$theirs" || $rstatus != ok ]]; then
            printf '%-24s %5s htsim time "%s", ReduceLab status %s\n' "$name" "$p" "$theirs" "$rstatus"
            status=1
            continue
        fi
        ratio=$(python3 -c "print(f'{$ours / $theirs:.3f}')")
        hwall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
        rwall=$(python3 -c "print(f'{$t2 - $t1:.2f}')")
        row=("$name" "$p" "$ops" "$theirs" "$ours" "$ratio" "${hnacks:-?}" "$rtrims" "$hwall" "$rwall")
        if [[ $diagnose == 1 ]]; then
            diag="?"
            if run_htsim "$work/htsim-diag/datacenter/htsim_ndp" "$base.bin" "$base.diag.out" \
                ATLAHS_RX_DONE=1 ATLAHS_EXACT_LAST=1; then
                diag=$(finish_ns "$base.diag.out")
            fi
            row+=("${diag:-?}" "$(python3 -c "print(f'{$ours / $diag:.3f}')" 2>/dev/null || echo '?')")
        fi
        # shellcheck disable=SC2059
        printf "$fmt\n" "${row[@]}"
        [[ -n "$keep" ]] || rm -rf "$base".*
    done
done
exit $status
