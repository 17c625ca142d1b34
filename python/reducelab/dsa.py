"""The DSA paper's figures (seed 001, §VII-B/C): training jobs sharing one switch's aggregator
memory under SwitchML, ATP and DSA (``[[traffic]] kind = "training"``, docs/ina.md).

A figure point sets the base scenario's (``scenarios/dsa/network.toml``) training entry from
the grid: ``series`` (the protocol: ``switchml``, ``atp``, ``dsa``, or DSA's strawmen
``dsa:always`` / ``dsa:coin`` of §VII-C), ``jobs``, ``workers`` per job, ``models`` (``A``,
``B`` or ``AB``: half of the jobs each, §VII-B "the ratio of A to B is 1:1") and ``seed``. The
star grows to the hosts the point needs (jobs × workers, plus one parameter server per job for
every series, so that all series of a point run on the same network). Figure parameters:
``model_scale`` (smaller runs of the same shape: partition sizes and computation times scaled
together), ``start_max_us`` and ``jitter_max_us`` (the seed's U(0, 1 ms) and U(0, 300 µs),
scaled with the model in small runs), ``seeds``, and ``switch_memory_bytes`` (the switch's
aggregation memory, when a figure sets it: Fig. 12's testbed).

Fig. 12 (§VII, "Performance in Lossy Networks") adds two grid axes: ``loss_at`` (``none``,
``worker``: the link of job 0's first worker, or ``ps``: the link of job 0's parameter server)
and ``loss`` (that link's per-traversal loss probability, a ``[[faults]] kind = "loss"``
entry). Points without loss are the same scenarios as without the axes.

A run's row: its parameters, the mean JCT over its jobs (``mean_jct_us``), the memory
utilisation (§VII-C: "the aggregation throughput over the link capacity 100 Gbps ... the
average utilization of all jobs": ``memory_utilization``), and the switch/PS/worker counters.
``speed_epochs_per_s`` is Fig. 12's training speed: a job is one epoch (§VII-B), so a run's
speed is 1 / mean JCT in epochs per second (for a fixed data set, proportional to the
images per second of a testbed). DSA runs also report the lost packets by §IV-C task type
(``lost_type_i`` … ``lost_type_iii``, summary.json ``training.task_types``), their shares of
all lost packets (``loss_share_i`` …) and ``loss_ii_over_iii``.
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

SERIES = ("switchml", "atp", "dsa", "dsa:always", "dsa:coin")
MODELS = {"A": ["A"], "B": ["B"], "AB": ["A", "B"]}
CSV_COLUMNS = ("series", "jobs", "workers", "models", "seed", "loss_at", "loss")
METRIC_COLUMNS = ("mean_jct_us", "max_jct_us", "memory_utilization", "verified", "end", "fallbacks", "preemptions",
                  "reminder_notices", "ps_reminders", "retransmissions", "lost_packets", "peak_aggregators",
                  "speed_epochs_per_s", "lost_type_i", "lost_type_ii", "lost_type_iii", "loss_share_i", "loss_share_ii",
                  "loss_share_iii", "loss_ii_over_iii")
LOSS_AT = ("none", "worker", "ps")
INT_COLUMNS = ("jobs", "workers", "seed", "fallbacks", "preemptions", "reminder_notices", "ps_reminders", "retransmissions",
               "lost_packets", "peak_aggregators", "lost_type_i", "lost_type_ii", "lost_type_iii")
FLOAT_COLUMNS = ("loss", "mean_jct_us", "max_jct_us", "memory_utilization", "speed_epochs_per_s", "loss_share_i",
                 "loss_share_ii", "loss_share_iii", "loss_ii_over_iii")


class DsaKind(TableKind):
    """Scenario runs of the DSA paper (see the module docstring)."""

    name = "dsa"
    columns = (*CSV_COLUMNS, *METRIC_COLUMNS)
    params = ("model_scale", "start_max_us", "jitter_max_us", "min_rto_us", "switch_memory_bytes", "seeds")
    """Figure parameters ([params], [scales.NAME.params]) this kind reads, besides the grid's."""
    keep_files = ("training_jobs.csv",)
    """Result files stored per point (besides summary.json)."""

    def network(self, base: Scenario) -> str:
        t = base.to_dict()["topology"]
        return f"star, {t.get('bandwidth_gbps')} Gb/s links of {t.get('latency_ns')} ns"

    def points(self, fig: Figure, scale: ScaleSpec, base: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
        doc = base.to_dict()
        [entry] = [t for t in doc["traffic"] if t.get("kind") == "training"]
        out = []
        for p in scale.grid_points():
            series = p["series"]
            if series not in SERIES:
                raise ValueError(f"grid.series: expected one of {', '.join(SERIES)}, got {series!r}")
            models = str(p.get("models", "A"))
            if models not in MODELS:
                raise ValueError(f"grid.models: expected one of {', '.join(MODELS)}, got {models!r}")
            jobs, workers, seed = int(p["jobs"]), int(p.get("workers", 8)), int(p.get("seed", 0)) + 1
            loss_at, loss = str(p.get("loss_at", "none")), float(p.get("loss", 0))
            if loss_at not in LOSS_AT:
                raise ValueError(f"grid.loss_at: expected one of {', '.join(LOSS_AT)}, got {loss_at!r}")
            if not 0 <= loss < 1 or (loss > 0) != (loss_at != "none"):
                raise ValueError(f"grid.loss: expected 0 with loss_at = none and within (0, 1) otherwise, got {loss!r} at {loss_at!r}")
            if loss_at == "ps" and series == "switchml":
                raise ValueError("grid.loss_at: 'ps' with series 'switchml' (SwitchML has no parameter server)")
            protocol, _, preemption = series.partition(":")
            t = {**entry, "protocol": protocol, "jobs": jobs, "workers": workers, "models": MODELS[models]}
            t.pop("preemption", None)
            if preemption:
                t["preemption"] = preemption
            for k in ("model_scale", "start_max_us", "jitter_max_us", "min_rto_us"):
                if k in scale.params:
                    t[k] = scale.params[k]
            d = {k: v for k, v in doc.items() if k != "traffic"}
            if "switch_memory_bytes" in scale.params:
                d["ina"] = {**d.get("ina", {}), "switch_memory_bytes": scale.params["switch_memory_bytes"]}
            d["topology"] = {**d["topology"], "hosts": jobs * (workers + 1)}
            d["name"] = f"dsa-{series}-{models}-{jobs}x{workers}"  # no figure name: figures share points
            d["seed"] = seed
            d["traffic"] = [t]
            if loss > 0:
                # On the star, host h's link is link h: job 0's first worker is host 0, its
                # parameter server host jobs × workers (docs/ina.md, placement).
                link = 0 if loss_at == "worker" else jobs * workers
                d["faults"] = [*d.get("faults", []), {"kind": "loss", "link": link, "probability": loss}]
                d["name"] += f"-loss-{loss_at}-{loss:g}"
            # A lossless point has no loss rate (None): claims "over all loss rates" see the lossy ones.
            params = {"series": series, "jobs": jobs, "workers": workers, "models": models, "seed": seed,
                      "loss_at": loss_at, "loss": loss if loss > 0 else None}
            out.append((params, Scenario.from_dict(d)))
        return out

    def row(self, params: Mapping[str, Any], stored: StoredRun, links: bool, link_kind: str = "network") -> dict[str, Any]:
        s = json.loads(stored.summary_json)
        t = s.get("training") or {}
        [entry] = [x for x in s["traffic"] if x["kind"] == "training"]
        jobs = entry["jobs"]
        ok = s["status"] == "completed" and all(j["verified"] for j in jobs) and len(jobs) == params["jobs"]
        mean = t.get("mean_jct_ps")
        row = {k: v for k, v in params.items() if not k.startswith("_")}
        row.update(
            mean_jct_us=None if mean is None else mean / 1e6,
            max_jct_us=None if t.get("max_jct_ps") is None else t["max_jct_ps"] / 1e6,
            memory_utilization=t.get("memory_utilization"), verified=ok, end=s["status"],
            fallbacks=t["switch"]["fallbacks"], preemptions=t["switch"]["preemptions"],
            reminder_notices=t["workers"]["reminder_notices"], ps_reminders=t["ps"]["reminders"],
            retransmissions=t["workers"]["retransmissions"], lost_packets=t["lost_packets"],
            peak_aggregators=t["peak_aggregators_in_use"], link_utils=[],
            speed_epochs_per_s=None if mean is None else 1e12 / mean,
        )
        row.update(loss_types(t.get("task_types")))
        return row

    def files(self, fig: Figure, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        return {f"{fig.stem}.csv": results_csv(rows)}


def loss_types(task_types: Mapping[str, Any] | None) -> dict[str, Any]:
    """Lost packets by §IV-C task type (DSA runs; empty elsewhere) and their shares."""
    if not task_types:
        return {}
    lost = task_types["lost_packets"]
    n = [int(lost["type_i"]), int(lost["type_ii"]), int(lost["type_iii"])]
    total = sum(n)
    out: dict[str, Any] = {"lost_type_i": n[0], "lost_type_ii": n[1], "lost_type_iii": n[2]}
    if total:
        out.update(loss_share_i=n[0] / total, loss_share_ii=n[1] / total, loss_share_iii=n[2] / total)
    if n[2]:
        out["loss_ii_over_iii"] = n[1] / n[2]
    return out


def results_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``STEM.csv``: one row per run."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS, *METRIC_COLUMNS])
    for r in rows:
        vals = []
        for k in (*CSV_COLUMNS, *METRIC_COLUMNS):
            v = r.get(k)
            vals.append("" if v is None else (str(v).lower() if isinstance(v, bool) else (f"{v:.6g}" if isinstance(v, float) else v)))
        w.writerow(vals)
    return buf.getvalue()


def rows_from_csv(text: str) -> list[dict[str, Any]]:
    """The rows of ``STEM.csv`` read back (`reducelab reproduce FIG --claims-only`)."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {"series": r["series"], "models": r["models"], "end": r["end"], "verified": r["verified"] == "true",
                               "loss_at": r.get("loss_at") or "none", "link_utils": []}
        # (tables written before Fig. 12 have no loss or speed columns)
        for k in INT_COLUMNS:
            row[k] = int(r[k]) if r.get(k, "") != "" else None
        for k in FLOAT_COLUMNS:
            row[k] = float(r[k]) if r.get(k, "") != "" else None
        out.append(row)
    return out
