#!/usr/bin/env bash
# ReduceLab's LogGP mode (crates/goal) against LogGOPSim on GOAL from LogGOPSim's own Schedgen2.
#
#   scripts/loggopsim-compare.sh SOURCE [--ranks "8 64 256 1024"] [--cases REGEX] [--random N] [--keep DIR]
#
# SOURCE is a LogGOPSim checkout or a bare git directory of spcl/LogGOPSim (e.g. the mirror
# /work/.mirror/spcl+LogGOPSim/repo); this script never downloads anything. Needs g++, gengetopt,
# re2c, libgraphviz-dev (LogGOPSim links cgraph) and python3. LogGOPSim and txt2bin are built in a
# temporary directory with -O2 (CMake's RelWithDebInfo flags, as its CMakeLists.txt sets), our
# `loggp` example with `cargo build --release` (CARGO_TARGET_DIR is respected).
#
# For every case (Schedgen2 collective and pattern, data size, rank count) it generates the GOAL,
# runs `txt2bin` + `LogGOPSim -f` and `loggp` with the same default parameters (L=2500 o=1500 g=1000
# G=6 O=0 S=65535), and prints: case, ranks, operations, LogGOPSim's maximum finishing time, ours,
# the difference; with 16 ranks or fewer LogGOPSim prints every host's end time and those are
# compared too ("hosts" column). The "binary" column checks our reader and writer of LogGOPSim's
# binary form: `loggp --write-binary` must write the bytes txt2bin wrote, and `loggp` on txt2bin's
# file must print what it prints on the text ("same"; else "bytes" or "run" says which differs). --random N (default 200; 0 for none) also runs the N random traces
# of crates/goal's property tests (dependency graphs on 2-6 ranks with calc, irequires, several
# tags; bursts on 2-11 ranks with two CPUs and NICs and rendezvous sizes) and counts those whose
# per-host end times differ. --cases keeps the cases whose name matches the
# (grep -E) REGEX. The exit status is 1 if any case differs.
set -euo pipefail

src=${1:?usage: scripts/loggopsim-compare.sh LOGGOPSIM_SOURCE [--ranks "8 64 256 1024"] [--keep DIR]}
shift
ranks="8 64 256 1024"
random=200
only=""
keep=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --ranks) ranks=$2; shift 2 ;;
        --random) random=$2; shift 2 ;;
        --cases) only=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

repo=$(cd "$(dirname "$0")/.." && pwd)
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

# LogGOPSim sources.
if [[ -d "$src/src/LogGOPSim" ]]; then
    cp -r "$src/src" "$work/lgs-src"
else
    mkdir -p "$work/lgs" && git --git-dir="$src" archive HEAD | tar -x -C "$work/lgs"
    cp -r "$work/lgs/src" "$work/lgs-src"
fi
build="$work/lgs-src/LogGOPSim"
(
    cd "$build"
    gengetopt -F loggopsim_cmdline -i loggopsim_cmdline.ggo
    gengetopt -F txt2bin_cmdline -i txt2bin_cmdline.ggo
    re2c -o txt2bin.cpp txt2bin.re
    g++ -std=c++11 -O2 -g -DNDEBUG -w txt2bin.cpp txt2bin_cmdline.c -o txt2bin
    g++ -std=c++11 -O2 -g -DNDEBUG -w LogGOPSim.cpp loggopsim_cmdline.c -o LogGOPSim -lcgraph
) >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
schedgen="$work/lgs-src/Schedgen2/schedgen.py"

(cd "$repo" && cargo build --release -q -p reducelab-goal --example loggp)
loggp="${CARGO_TARGET_DIR:-$repo/target}/release/examples/loggp"

# name | schedgen arguments (without --comm_size/--output); recdoub needs a power of two.
# "py:CALL" calls Schedgen2's Python directly (P = the rank count): schedgen.py passes its
# dissemination() keyword arguments it does not take (a TypeError upstream).
cases=(
    "allreduce-recdoub-1KiB|allreduce --ptrn recdoub --datasize 1024"
    "allreduce-ring-64KiB|allreduce --ptrn ring --datasize 65536"
    "allreduce-ring-8MiB|allreduce --ptrn ring --datasize 8388608"
    "bcast-binomial-1KiB|bcast --ptrn binomialtree --datasize 1024"
    "bcast-linear-1MiB|bcast --ptrn linear --datasize 1048576"
    "reduce-binomial-1MiB|reduce --ptrn binomialtree --datasize 1048576"
    "scatter-linear-4KiB|scatter --ptrn linear --datasize 4096"
    "alltoall-linear-1KiB|alltoall --ptrn linear --datasize 1024"
    "dissemination-8B|py:dissemination(comm_size=P, datasize=8, tag=42)"
    "incast-64KiB|incast --datasize 65536"
    "outcast-1MiB|outcast --datasize 1048576"
    "allreduce-ring-2groups-4KiB|allreduce --ptrn ring --datasize 4096 --num_comm_groups 2"
)

printf '%-30s %6s %10s %16s %16s %8s %6s %6s\n' case ranks ops LogGOPSim ours diff hosts binary
status=0
for c in "${cases[@]}"; do
    name=${c%%|*}
    args=${c#*|}
    if [[ -n "$only" ]] && ! grep -qE "$only" <<<"$name"; then
        continue
    fi
    for p in $ranks; do
        g="$work/$name-$p.goal"
        if [[ $args == py:* ]]; then
            call=${args#py:}
            gen=(python3 -c "import sys; sys.path.insert(0, '$(dirname "$schedgen")'); from mpi_colls import *; \
from additional_microbenchmarks import *; P = $p; ${call}.write_goal(fh=open('$g', 'w'))")
        else
            # shellcheck disable=SC2206
            gen=(python3 "$schedgen" $args --comm_size "$p" --output "$g")
        fi
        if ! "${gen[@]}" 2>"$work/schedgen.err"; then
            printf '%-30s %6s %s\n' "$name" "$p" "schedgen failed: $(tail -1 "$work/schedgen.err")"
            continue
        fi
        "$build/txt2bin" -i "$g" -o "$g.bin" >/dev/null
        theirs=$("$build/LogGOPSim" -f "$g.bin")
        ours=$("$loggp" "$g")
        "$loggp" "$g" --write-binary "$g.ours.bin"
        binary="same"
        cmp -s "$g.bin" "$g.ours.bin" || binary="bytes"
        [[ "$("$loggp" "$g.bin")" == "$ours" ]] || binary="run"
        [[ $binary == same ]] || status=1
        rm -f "$g.ours.bin"
        ops=$(echo "$ours" | sed -n 's/^Critical path: .*; \([0-9]*\) operations.*/\1/p')
        if echo "$theirs" | grep -q '^Maximum finishing time'; then
            t=$(echo "$theirs" | sed -n 's/^Maximum finishing time at host [0-9]*: \([0-9]*\).*/\1/p')
            hosts="-"
        else
            t=$(echo "$theirs" | sed -n 's/^Host [0-9]*: \([0-9]*\)$/\1/p' | sort -n | tail -1)
            if diff <(echo "$theirs" | grep '^Host ') <(echo "$ours" | grep '^Host ') >/dev/null; then
                hosts="same"
            else
                hosts="DIFF"
                status=1
            fi
        fi
        o=$(echo "$ours" | sed -n 's/^Maximum finishing time at host [0-9]*: \([0-9]*\).*/\1/p')
        if [[ -z "$t" ]]; then
            printf '%-30s %6s %10s %s\n' "$name" "$p" "$ops" "LogGOPSim printed no time: $(echo "$theirs" | tail -2 | tr '\n' ' ')"
            status=1
            continue
        fi
        d=$((o - t))
        [[ $d -eq 0 ]] || status=1
        printf '%-30s %6s %10s %16s %16s %8s %6s %6s\n' "$name" "$p" "$ops" "$t" "$o" "$d" "$hosts" "$binary"
        rm -f "$g.bin"
        [[ -n "$keep" ]] || rm -f "$g"
    done
done

if [[ $random -gt 0 ]]; then
    mkdir -p "$work/random"
    (cd "$repo" && GOAL_RANDOM_DIR="$work/random" GOAL_RANDOM_COUNT=$random \
        cargo test --release -q -p reducelab-goal --test loggp -- --ignored write_random_traces >/dev/null)
    same=0
    differ=0
    bin_differ=0
    for g in "$work"/random/*.goal; do
        "$build/txt2bin" -i "$g" -o "$g.bin" >/dev/null
        "$loggp" "$g" --write-binary "$g.ours.bin"
        if ! cmp -s "$g.bin" "$g.ours.bin" || [[ "$("$loggp" "$g.bin")" != "$("$loggp" "$g")" ]]; then
            bin_differ=$((bin_differ + 1))
            echo "random trace's binary form differs (bytes or run): $g"
            status=1
        fi
        if diff <("$build/LogGOPSim" -f "$g.bin" | grep '^Host ') <("$loggp" "$g" | grep '^Host ') >/dev/null; then
            same=$((same + 1))
        else
            differ=$((differ + 1))
            echo "random trace differs: $g"
            status=1
        fi
    done
    echo "random traces: $same with the same end time on every host, $differ differ; binary form: $bin_differ differ"
fi
exit $status
