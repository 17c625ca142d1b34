"""Flare (seed 004) §7.1, Fig. 15: sparse allreduce at scale, as scenario figures.

A point is one allreduce of every host of the base scenario (``scenarios/flare/network.toml``):
``series`` is ``ring`` (dense host-based, the engine's ring schedule), ``flare`` (dense
in-network), ``flare_sparse`` (sparse in-network, §7), ``sparcml`` (SparCML's host-based
sparse recursive doubling) or ``sparcml_split`` (SparCML's split allgather); the sparse series use the synthetic top-1-per-bucket gradients of
``reducelab_flare::sparse::gradients`` (one value per bucket of ``bucket_elements``, index
overlap ``overlap``). Each row has the allreduce's runtime and the bytes that crossed every link
(``traffic_bytes``: the sum of ``links.csv``'s ``bytes``, each hop counted: "the total number of
bytes that traversed the network"). docs/flare-sparse.md.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .figures import TableKind
from .scenario import Scenario

if TYPE_CHECKING:
    from .figures import Figure, ScaleSpec
    from .store import StoredRun

SERIES = ("ring", "flare", "flare_sparse", "sparcml", "sparcml_split")
CSV_COLUMNS = ("series", "overlap", "hosts", "bytes")
RESULT_COLUMNS = ("runtime_ps", "goodput_gbps", "traffic_bytes", "verified", "end", "sim_time_ps")


def _traffic(series: str, hosts: int, nbytes: int, elements: int, bucket: int, overlap: float) -> dict[str, Any]:
    if series == "ring":
        return {"kind": "collective", "algorithm": "ring", "hosts": "all", "bytes": nbytes}
    if series not in SERIES:
        raise ValueError(f"series {series!r}: expected one of {', '.join(SERIES)}")
    t: dict[str, Any] = {"kind": "ina_allreduce", "protocol": series, "hosts": "all", "bytes": nbytes,
                         "elements_per_packet": elements}
    if series in ("flare_sparse", "sparcml", "sparcml_split"):
        t["bucket_elements"] = bucket
        t["index_overlap"] = overlap
    return t


def traffic_bytes(links_csv_text: str | None) -> int:
    """Bytes over every directed link of a run (``links.csv``'s ``bytes`` column, summed)."""
    if links_csv_text is None:
        raise AssertionError("links.csv was not stored")
    return sum(int(r["bytes"]) for r in csv.DictReader(io.StringIO(links_csv_text)))


class FlareSparseKind(TableKind):
    """Scenario runs of Flare's Fig. 15 (see the module docstring)."""

    name = "flare_sparse"
    columns = (*CSV_COLUMNS, *RESULT_COLUMNS, "runtime_us", "traffic_mib")
    params = ("bytes", "elements", "bucket_elements", "overlap")
    keep_files = ("links.csv",)

    def network(self, base: Scenario) -> str:
        from .canary import describe_network

        return describe_network(base.to_dict()["topology"])

    def points(self, fig: Figure, scale: ScaleSpec, base: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
        doc = base.to_dict()
        from .canary import topology_hosts

        n_hosts = topology_hosts(doc["topology"])
        out = []
        for p in scale.grid_points():
            series = str(p["series"])
            nbytes = int(p.get("bytes", scale.params["bytes"]))
            elements = int(p.get("elements", scale.params.get("elements", 256)))
            bucket = int(p.get("bucket_elements", scale.params.get("bucket_elements", 512)))
            overlap = float(p.get("overlap", scale.params.get("overlap", 0.0)))
            d = {k: v for k, v in doc.items() if k != "traffic"}
            d["name"] = f"{fig.stem}-{series}"
            d["traffic"] = [_traffic(series, n_hosts, nbytes, elements, bucket, overlap)]
            params = {"series": series, "overlap": overlap, "hosts": n_hosts, "bytes": nbytes}
            out.append((params, Scenario.from_dict(d)))
        return out

    def row(self, params: Mapping[str, Any], stored: StoredRun, links: bool, link_kind: str = "network") -> dict[str, Any]:
        s = json.loads(stored.summary_json)
        t = [e for e in s["traffic"] if e["kind"] in ("ina_allreduce", "collective")]
        if len(t) != 1:
            raise AssertionError(f"expected one allreduce entry, got {len(t)}")
        e = t[0]
        ok = s["status"] == "completed" and e.get("runtime_ps") is not None
        if e["kind"] == "collective":
            ok = ok and bool(e["result_verified"])
        else:
            ok = ok and e["verified"] == e["hosts"] and e["bad_blocks"] == 0
        row = dict(params)
        rt = int(e.get("runtime_ps") or 0)
        tb = traffic_bytes(stored.files.get("links.csv"))
        row.update(runtime_ps=rt, goodput_gbps=float(e.get("goodput_gbps") or 0.0), traffic_bytes=tb, verified=ok,
                   end=s["status"], sim_time_ps=int(s["sim_time_ps"]), runtime_us=rt / 1e6, traffic_mib=tb / 2**20)
        return row

    def files(self, fig: Figure, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([*CSV_COLUMNS, *RESULT_COLUMNS])
        for r in rows:
            w.writerow([*(r[k] for k in CSV_COLUMNS), r["runtime_ps"], f"{r['goodput_gbps']:.4f}", r["traffic_bytes"],
                        str(r["verified"]).lower(), r["end"], r["sim_time_ps"]])
        return {f"{fig.stem}.csv": buf.getvalue()}

    def rows_from_csv(self, text: str) -> list[dict[str, Any]]:
        """The rows of ``STEM.csv`` (`files`) read back, for judging claims without running."""
        out = []
        for r in csv.DictReader(io.StringIO(text)):
            rt, tb = int(r["runtime_ps"]), int(r["traffic_bytes"])
            out.append({"series": r["series"], "overlap": float(r["overlap"]), "hosts": int(r["hosts"]),
                        "bytes": int(r["bytes"]), "runtime_ps": rt, "goodput_gbps": float(r["goodput_gbps"]),
                        "traffic_bytes": tb, "verified": r["verified"] == "true", "end": r["end"],
                        "sim_time_ps": int(r["sim_time_ps"]), "runtime_us": rt / 1e6, "traffic_mib": tb / 2**20})
        return out
