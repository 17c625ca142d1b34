#!/usr/bin/env bash
# Checks ReduceLab's hand-written Chakra reader (crates/chakra) against MLCommons' own protobuf
# classes, both ways, in a temp dir (nothing is kept):
#  1. compiles et_def.proto with grpcio-tools, writes a 4-rank trace with the generated classes
#     (compute, an allreduce, a point-to-point message, and a field our reader does not use),
#     and runs it as `kind = "chakra"` traffic at packet level;
#  2. parses the shipped example (scenarios/examples/chakra_training/) with the generated
#     classes and prints each file's node count and collectives as they read them.
#
# usage: scripts/chakra-protobuf-check.sh [ET_DEF_PROTO]   (or CHAKRA_PROTO=...; the file is
# schema/protobuf/et_def.proto of an mlcommons/chakra checkout). Skips (exit 0, with a message)
# without it. The venv needs PyPI: protobuf grpcio-tools.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
proto=${1:-${CHAKRA_PROTO:-}}
if [[ -z "$proto" || ! -f "$proto" ]]; then
    echo "chakra-protobuf-check: SKIPPED: no et_def.proto given (argument or CHAKRA_PROTO)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv" && "$tmp/venv/bin/pip" install -q protobuf grpcio-tools \
    || { echo "chakra-protobuf-check: SKIPPED: cannot set up the venv"; exit 0; }
cp "$proto" "$tmp/et_def.proto"
(cd "$tmp" && venv/bin/python -m grpc_tools.protoc -I. --python_out=. et_def.proto) || exit 1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/target}
(cd "$here" && cargo build -q --release -p reducelab-sim --example run_scenario) || exit 1
mkdir -p "$tmp/trace"
"$tmp/venv/bin/python" - "$tmp" "$here/scenarios/examples/chakra_training" <<'PY' || exit 1
import sys, pathlib
sys.path.insert(0, sys.argv[1])
import et_def_pb2 as pb
from google.protobuf.internal.encoder import _VarintBytes
from google.protobuf.internal.decoder import _DecodeVarint32

tmp, example = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

def attr(name, **kw):
    a = pb.AttributeProto(name=name)
    for k, v in kw.items():
        setattr(a, k, v)
    return a

# 1. A trace written by the official classes.
P = 4
for r in range(P):
    msgs = [pb.GlobalMetadata(version="0.0.4")]
    comp = pb.Node(id=1, name="fwd", type=pb.COMP_NODE, duration_micros=20)
    comp.attr.append(attr("is_cpu_op", bool_val=False))  # a field the reader does not use
    coll = pb.Node(id=2, name="grad_allreduce", type=pb.COMM_COLL_NODE, data_deps=[1])
    coll.attr.extend([attr("comm_type", int64_val=pb.ALL_REDUCE), attr("comm_size", int64_val=1 << 20)])
    peer = (r + 1) % P if r % 2 == 0 else (r - 1) % P
    kind = pb.COMM_SEND_NODE if r % 2 == 0 else pb.COMM_RECV_NODE
    p2p = pb.Node(id=3, name="p2p", type=kind, ctrl_deps=[2])
    p2p.attr.extend([attr("comm_src", int32_val=r if r % 2 == 0 else peer),
                     attr("comm_dst", int32_val=peer if r % 2 == 0 else r),
                     attr("comm_tag", int32_val=7), attr("comm_size", int64_val=4096)])
    msgs += [comp, coll, p2p]
    with open(tmp / "trace" / f"official.{r}.et", "wb") as f:
        for m in msgs:
            b = m.SerializeToString()
            f.write(_VarintBytes(len(b)) + b)

# 2. The shipped example, read by the official classes.
for path in sorted(example.glob("*.et")):
    data, pos, nodes, colls = path.read_bytes(), 0, 0, []
    first = True
    while pos < len(data):
        n, pos = _DecodeVarint32(data, pos)
        msg = pb.GlobalMetadata() if first else pb.Node()
        msg.ParseFromString(data[pos:pos + n])
        pos += n
        if not first:
            nodes += 1
            if msg.type == pb.COMM_COLL_NODE:
                a = {x.name: x for x in msg.attr}
                colls.append((pb.CollectiveCommType.Name(a["comm_type"].int64_val), a["comm_size"].int64_val))
        first = False
    print(f"official classes read {path.name}: {nodes} nodes, collectives {colls}")
PY
cat > "$tmp/official.toml" <<'TOML'
name = "chakra-official-classes"
[topology]
kind = "fat_tree_2"
leaves = 2
hosts_per_leaf = 2
spines = 2
bandwidth_gbps = 100
latency_ns = 500
[[traffic]]
kind = "chakra"
trace = "trace/official"
TOML
"$CARGO_TARGET_DIR/release/examples/run_scenario" "$tmp/official.toml" "$tmp/out" | grep -E "^(status|chakra|goal)" || exit 1
grep -q '"status": "completed"' "$tmp/out/summary.json" && echo "chakra-protobuf-check: the official classes' trace ran, completed and verified"
