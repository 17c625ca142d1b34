"""Every name of the algorithm registry through every front end: a scenario file (parse and a
small verified packet-level run), the Python API (`reducelab.algorithms`, schedule export and
check), the CLI (`reducelab model`, `reducelab schedule export`) and the C ABI
(`rl_algorithm_count/info/resolve` and `rl_program_build` of libreducelab_capi.so, through
ctypes). The MPI runtime runs every name in test_mpi_runtime.py. An unknown name is a clear
error listing the known names in each of them."""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import pytest

import reducelab
from helpers import cli
from reducelab import _core

ROOT = Path(__file__).resolve().parents[2]
NAMES = [a.name for a in reducelab.algorithms()]


def _coll(name: str) -> str:
    """The collective a name is tried with: allreduce, or the first one it runs (all-to-all)."""
    info = {a.name: a for a in reducelab.algorithms()}.get(name)
    return info.collectives[0] if info else "allreduce"

BOGUS = "warp-drive"


def test_the_registry_is_the_one_list() -> None:
    infos = reducelab.algorithms()
    assert len(NAMES) == len(set(NAMES)) >= 13
    variants = [a.name for a in infos if a.kind == "variant"]
    assert variants == _core.algorithms()
    kinds = {a.kind for a in infos}
    assert kinds == {"variant", "family", "alias", "policy"}
    for a in infos:
        assert a.summary and a.family
        assert all(v in variants for v in a.resolves_to), a
        assert (a.size_class is not None) == (a.kind == "variant")


def _scenario(name: str) -> str:
    return f"""
name = "registry-{name}"
[topology]
kind = "torus"
dims = [4, 4]
bandwidth_gbps = 100
latency_ns = 100
[[traffic]]
kind = "collective"
algorithm = "{name}"
collective = "{_coll(name)}"
bytes = 4096
"""


@pytest.mark.parametrize("name", NAMES)
def test_every_name_runs_in_a_scenario(name: str) -> None:
    """Parse and a verified packet-level run; the summary names the variant that ran."""
    info = {a.name: a for a in reducelab.algorithms()}[name]
    s = reducelab.run(_scenario(name)).summary
    ran = s["traffic"][0]["algorithm"]
    assert ran in info.resolves_to, (name, ran)
    msgs = s["messages"]
    assert msgs["count"] > 0 and msgs["verified"] == msgs["count"]
    status = s["status"] if "status" in s else ("completed" if msgs["all_verified"] else "not verified")
    assert status == "completed"


def test_an_unknown_name_in_a_scenario_names_the_field_and_the_known_names() -> None:
    with pytest.raises(reducelab.ScenarioError) as err:
        reducelab.run(_scenario(BOGUS))
    assert err.value.field == "traffic[0].algorithm"
    assert all(n in err.value.reason for n in NAMES), err.value.reason


@pytest.mark.parametrize("name", NAMES)
def test_every_name_exports_and_checks_from_python(name: str) -> None:
    text = reducelab.schedule.export(name, "torus:4x4", "json", size_bytes=4096, collective=_coll(name))
    c = reducelab.schedule.check(text)
    assert c.ranks == 16 and c.algorithm in {a.name: a for a in reducelab.algorithms()}[name].resolves_to
    goal = reducelab.schedule.export(name, "torus:4x4", "goal", size_bytes=4096, collective=_coll(name))
    assert goal.count("\nrank ") == 16 and "num_ranks 16\n" in goal


def test_python_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown algorithm 'warp-drive'.*swing-bandwidth"):
        reducelab.schedule.export(BOGUS, "torus:4x4")
    with pytest.raises(ValueError, match="unknown format 'dot'"):
        reducelab.schedule.export("ring", "torus:4", "dot")
    with pytest.raises(ValueError, match="size_bytes"):
        reducelab.schedule.export("ring", "torus:4", "goal", size_bytes=0)
    bad = json.loads(reducelab.schedule.export("ring", "torus:4"))
    bad["programs"][0]["steps"][0]["recvs"] = []
    with pytest.raises(ValueError, match="checker"):
        reducelab.schedule.check(json.dumps(bad))


@pytest.mark.parametrize("name", NAMES)
def test_every_name_through_cli_model(name: str) -> None:
    coll = _coll(name)
    proc = cli("model", "--algorithm", name, "--topology", "torus:4x4", "--size", "64KiB", "--collective", coll)
    assert proc.returncode == 0, proc.stderr
    info = {a.name: a for a in reducelab.algorithms()}[name]
    first = proc.stdout.splitlines()[0]
    if info.kind == "variant":
        # An all-to-all's vector is every rank's send buffer: 16 x 64 KiB.
        size = "64 KiB" if coll != "alltoall" else "1 MiB"
        assert first.startswith(f"{name} {coll} of {size} on torus:4x4"), first
    else:
        assert first.startswith(f"{name} resolves to ") and first.split()[3] in info.resolves_to


def test_cli_lists_the_registry_and_rejects_unknown_names() -> None:
    listed = cli("model", "--list")
    assert listed.returncode == 0
    rows = listed.stdout.splitlines()[1:]
    assert [r.split()[0] for r in rows] == NAMES
    for args in (("model", "-a", BOGUS, "-t", "torus:4x4"), ("schedule", "export", "-a", BOGUS, "-t", "torus:4")):
        proc = cli(*args)
        assert proc.returncode == 2
        assert f"unknown algorithm '{BOGUS}'" in proc.stderr and all(n in proc.stderr for n in NAMES)


def test_cli_schedule_export_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    proc = cli("schedule", "export", "-a", "swing", "-t", "torus:6x4", "--size", "32KiB", "--out", out)
    assert proc.returncode == 0, proc.stderr
    checked = cli("schedule", "check", out)
    assert checked.returncode == 0 and "swing-latency, 24 ranks" in checked.stdout and "checker passed" in checked.stdout
    goal = cli("schedule", "export", "-a", "bucket", "-t", "torus:3x5", "-f", "goal")
    assert goal.returncode == 0 and goal.stdout.startswith("// bucket") and "num_ranks 15" in goal.stdout
    xml = cli("schedule", "export", "-a", "ring", "-t", "torus:5", "-f", "msccl")
    assert xml.returncode == 0 and xml.stdout.count("<gpu ") == 5


# ---- the C ABI, through ctypes on the built cdylib ----


def _capi() -> ctypes.CDLL:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    lib = target / "release" / "libreducelab_capi.so"
    if not lib.exists():
        if os.environ.get("REDUCELAB_REQUIRE_MPI") == "1":
            pytest.fail(f"{lib} not built (make -C mpi builds it)")
        pytest.skip(f"{lib} not built (make -C mpi builds it)")
    return ctypes.CDLL(str(lib))


class _Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_char_p) for f in ("name", "family", "kind", "size_class", "resolves_to", "substitute",
                                                 "summary")] + [
        (f, ctypes.c_uint32) for f in ("max_ranks", "direct_plan", "model_row", "rank_ordered_1d", "halves", "min_dims")
    ] + [("collectives", ctypes.c_char_p)]


def test_every_name_through_the_c_abi() -> None:
    lib = _capi()
    lib.rl_algorithm_count.restype = ctypes.c_size_t
    lib.rl_algorithm_info.argtypes = [ctypes.c_size_t, ctypes.POINTER(_Info)]
    u32 = ctypes.c_uint32
    lib.rl_algorithm_resolve.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(u32), ctypes.c_size_t,
                                         ctypes.c_uint64, ctypes.c_double, ctypes.c_double, ctypes.c_int32,
                                         ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_size_t]
    lib.rl_program_build.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(u32), ctypes.c_size_t, u32,
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
    lib.rl_program_free.argtypes = [ctypes.c_void_p]
    n = lib.rl_algorithm_count()
    names = []
    for i in range(n):
        info = _Info()
        assert lib.rl_algorithm_info(i, ctypes.byref(info)) == 0
        names.append(info.name.decode())
    assert names == NAMES
    assert lib.rl_algorithm_info(n, ctypes.byref(_Info())) == 1
    dims = (u32 * 2)(4, 2)
    err = ctypes.create_string_buffer(2048)
    for name in NAMES:
        out = ctypes.c_char_p()
        rc = lib.rl_algorithm_resolve(name.encode(), 0, dims, 2, 1024, 2e-6, 1 / 4e9, 0, ctypes.byref(out), err, 2048)
        assert rc == 0, err.value
        variant = out.value.decode()
        assert variant in {a.name: a for a in reducelab.algorithms()}[name].resolves_to
        prog = ctypes.c_void_p()
        rc = lib.rl_program_build(variant.encode(), 0, dims, 2, 3, ctypes.byref(prog), err, 2048)
        if _coll(name) != "allreduce":
            assert rc == 2 and b"not allreduce" in err.value, (name, rc, err.value)
            continue
        assert rc == 0, (name, err.value)
        lib.rl_program_free(prog)
    out = ctypes.c_char_p()
    rc = lib.rl_algorithm_resolve(BOGUS.encode(), 0, dims, 2, 8, 2e-6, 1 / 4e9, 0, ctypes.byref(out), err, 2048)
    assert rc == 2 and all(n in err.value.decode() for n in NAMES)


@pytest.mark.parametrize(("name", "topology"), [("ring", "torus:5"), ("swing-bandwidth", "torus:6x4"),
                                                ("bucket", "torus:3x5"), ("recursive-doubling", "torus:7"),
                                                ("hamiltonian-rings", "torus:4x4")])
def test_msccl_xml_parses_with_the_schedules_counts(name: str, topology: str) -> None:
    """The MSCCL export parses as XML (ElementTree) with one <gpu> per rank, and as many send and
    receive steps as the JSON schedule has contiguous block runs to send and receive."""
    import xml.etree.ElementTree as ET

    sched = json.loads(reducelab.schedule.export(name, topology, "json", size_bytes=1 << 20))
    root = ET.fromstring(reducelab.schedule.export(name, topology, "msccl", size_bytes=1 << 20))
    assert root.tag == "algo" and int(root.get("ngpus", "0")) == sched["ranks"]
    assert int(root.get("nchunksperloop", "0")) == sched["blocks"]
    gpus = root.findall("gpu")
    assert [int(g.get("id", "-1")) for g in gpus] == list(range(sched["ranks"]))
    for g, prog in zip(gpus, sched["programs"]):
        steps = [s for tb in g.findall("tb") for s in tb.findall("step")]
        sends = sum(len(t["blocks"]) for st in prog["steps"] for t in st.get("sends", []))
        recvs = sum(len(t["blocks"]) for st in prog["steps"] for t in st.get("recvs", []))
        assert sum(s.get("type") == "s" for s in steps) == sends
        assert sum(s.get("type") in ("r", "rrc") for s in steps) == recvs
