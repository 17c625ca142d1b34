"""In-network allreduce of application data through running software switches (docs/switch.md).

Start the switches first (`reducelab switch switch --scenario F --node N` for each switch node,
`reducelab switch plan --scenario F` lists them), then call `allreduce` once per host of the
scenario's allreduce, each in its own thread or process, with the same `start_at`::

    import time, numpy as np, reducelab.innet as innet
    start = time.time() + 0.5          # every host binds its socket before anyone sends
    total = innet.allreduce(np.arange(1024, dtype=np.int32), scenario="scenarios/switch/star4_canary.toml",
                            host=rank, start_at=start)

The vector length must be the allreduce's `bytes / 4`. Values are int32 and sums wrap (the
switches' integer ALUs); floats are not converted for you.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import _core


def allreduce(
    array: Any,
    *,
    scenario: str | os.PathLike[str],
    host: int,
    tenant: int = 0,
    ip_base: str = "127.0.100.1",
    port_base: int = 47000,
    timeout_s: float = 10.0,
    start_at: float | None = None,
    report: bool = False,
) -> Any:
    """Host `host`'s contribution `array` (converted to int32) to allreduce `tenant` of the
    scenario file (or TOML text) `scenario`; returns the element-wise sum as a numpy int32
    array (with the host's report dict when `report=True`).

    Raises ValueError for a bad scenario, host, endpoint or length, RuntimeError when the run
    cannot finish (a timeout naming what is missing and why).
    """
    import numpy as np

    a = np.ascontiguousarray(array)
    if a.dtype != np.int32:
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"array: dtype {a.dtype}; the switches add int32 values (convert floats to fixed point first)")
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise ValueError("array: values outside the int32 range")
        a = a.astype(np.int32)
    text = scenario if isinstance(scenario, str) and "\n" in scenario else Path(scenario).read_text(encoding="utf-8")
    data, rep = _core.innet_allreduce(
        text, host, a.reshape(-1).tobytes(), tenant=tenant, ip_base=ip_base, port_base=port_base,
        timeout_s=timeout_s, start_at=start_at,
    )
    out = np.frombuffer(data, dtype=np.int32).reshape(a.shape).copy()
    return (out, json.loads(rep)) if report else out
