#!/usr/bin/env bash
# Generates MSCCL XML with Microsoft's msccl-tools (its examples/mscclang programs) in a temp
# dir and runs ReduceLab's importer and checker on each (crates/sched/src/msccl_import.rs),
# printing a table: program, arguments, ngpus, accepted (IR steps, messages) or rejected
# (the importer's or the checker's reason). Nothing it generates is kept.
#
# usage: scripts/msccl-tools-check.sh [MSCCL_TOOLS_CHECKOUT]   (or MSCCL_TOOLS=...)
# Skips (exit 0, with a message) without a checkout. The venv needs PyPI: lxml humanfriendly
# tabulate argcomplete z3-solver igraph.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tools=${1:-${MSCCL_TOOLS:-}}
if [[ -z "$tools" || ! -d "$tools/msccl/language" ]]; then
    echo "msccl-tools-check: SKIPPED: no msccl-tools checkout given (argument or MSCCL_TOOLS)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=${MSCCL_VENV:-$tmp/venv}
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv" && "$venv/bin/pip" install -q lxml humanfriendly tabulate argcomplete z3-solver igraph \
        || { echo "msccl-tools-check: SKIPPED: cannot set up the venv"; exit 0; }
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/target}
(cd "$here" && cargo build -q --release -p reducelab-sched --example msccl) || exit 1
importer=$CARGO_TARGET_DIR/release/examples/msccl
# program | arguments
programs=(
    "simple/allreduce_ring|4 1"
    "simple/allreduce_ring|8 1"
    "simple/allgather_ring|"
    "allreduce_a100_ring|8 1 1 --protocol Simple"
    "allreduce_a100_ring|8 4 1"
    "allreduce_a100_ring|8 2 2"
    "allreduce_a100_allpairs|8 1"
    "allreduce_a100_allpairs_v2|8 1"
    "allreduce_1step|4 1"
    "allreduce_binomial_tree|8 1 1"
    "allreduce_binomial_tree|8 2 1"
    "allreduce_recursive_doubling_halving|8 1"
    "allreduce_a100_recursive_doubling_halving|1 1"
    "hierarchical_allreduce|4 2 1"
    "allreduce_a100_pcie_hierarchical|8 1"
    "allreduce_ndv2|1"
    "allreduce_dgx1|1 1"
    "allreduce_a100_multinode_allpairs|8 1"
    "allgather_ring|8 1 1"
    "allgather_allpairs|8 1"
    "allgather_recursive_doubling|8 1"
    "alltoall_allpairs|8 1"
    "alltoall_allpairs|4 2"
    "alltoall_a100_two_step|2 4"
    "alltoall_a100_three_step|2 4 1"
)
printf '%-44s %-16s %-6s %s\n' program arguments ngpus result
for entry in "${programs[@]}"; do
    prog=${entry%%|*}
    args=${entry#*|}
    src=$tools/examples/mscclang/$prog.py
    [[ -f "$src" ]] || continue
    xml=$tmp/$(echo "$prog $args" | tr ' /' '__').xml
    # shellcheck disable=SC2086
    if ! PYTHONPATH=$tools "$venv/bin/python" "$src" $args >"$xml" 2>"$xml.err" || ! grep -q '<algo' "$xml"; then
        printf '%-44s %-16s %-6s %s\n' "$prog" "$args" - "msccl-tools failed: $(tail -1 "$xml.err" | cut -c1-100)"
        continue
    fi
    # A program whose own Check() fails prints its complaints after the XML: keep the XML.
    note=""
    if [[ $(tail -n1 "$xml") != "</algo>" ]]; then
        sed -i '/^<\/algo>$/q' "$xml"
        note=" (msccl-tools' own Check() printed errors after the XML)"
    fi
    IFS=$'\t' read -r _ ngpus verdict why < <("$importer" import "$xml")
    printf '%-44s %-16s %-6s %s\n' "$prog" "$args" "$ngpus" "$verdict: $why$note"
done
