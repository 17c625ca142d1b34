"""In-network allreduce of application data through running software switches (docs/switch.md).

Start the switches first (`reducelab switch switch --scenario F --node N` for each switch node,
`reducelab switch plan --scenario F` lists them), then call `allreduce` once per host of the
scenario's allreduce, each in its own thread or process, with the same `start_at`::

    import time, numpy as np, reducelab.innet as innet
    start = time.time() + 0.5          # every host binds its socket before anyone sends
    total = innet.allreduce(np.arange(1024, dtype=np.int32), scenario="scenarios/switch/star4_canary.toml",
                            host=rank, start_at=start)

The vector length must be the allreduce's `bytes / 4`. Values are int32 and sums wrap (the
switches' integer ALUs). `Session` (below) keeps a rank open for many calls and reduces float32 too.
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


class Session:
    """One rank of `ranks` (host `rank` of the scenario) that stays: its socket is bound once and
    every `allreduce` call is one in-network allreduce of any length, int32 (wrapping sums) or
    float32 (fixed point with a shared exponent: within ``n·2^(e+ceil(log2 n)-31) + |exact|·2^-24``
    of the exact sum, where ``|x| < 2^e`` for every input; docs/switch.md, "Sessions, floats and
    the C ABI"). Through the C ABI (``libreducelab_innet.so``: ``REDUCELAB_INNET_LIB``, else next
    to the switch binary). The scenario's traffic chooses the protocol (``protocol``): a canary
    allreduce (rank r is host r), a reliable_tree allreduce (rank r is its r-th host; ``ranks``
    must be its hosts), or one training job of switchml, atp or dsa (rank r is worker r;
    ``ranks`` must be the job's workers; rank 0 runs ATP's or DSA's parameter server; such a switch serves
    one session per start, docs/switch.md, "Pool sessions"). Every rank opens before any rank's
    first call (a barrier), then all make the same sequence of calls::

        with innet.Session("scenarios/switch/star4_canary.toml", ranks=4, rank=r) as s:
            barrier.wait()
            total = s.allreduce(np.ones(10_000, dtype=np.float32))

    Raises ValueError (bad arguments, no switch listening: the message names the cause) or
    RuntimeError (a call that cannot finish).
    """

    def __init__(self, scenario: str | os.PathLike[str], ranks: int, rank: int, *, ip_base: str = "127.0.100.1",
                 port_base: int = 47000, endpoints: str | os.PathLike[str] | None = None, timeout_s: float = 10.0,
                 library: str | os.PathLike[str] | None = None) -> None:
        import ctypes

        self._lib = _library(library)
        err = ctypes.create_string_buffer(2048)
        # `endpoints`: the switches' --endpoints file (nodes at any addresses), instead of
        # ip_base/port_base (docs/switch.md, "What a run is").
        where = b"file:" + os.fsencode(endpoints) if endpoints is not None else f"{ip_base}:{port_base}".encode()
        self._h = self._lib.RL_Innet_open(os.fsencode(scenario), where, ranks, rank, float(timeout_s), err, len(err))
        if not self._h:
            raise ValueError(err.value.decode(errors="replace"))

    @property
    def protocol(self) -> str:
        """The protocol the switch runs, by its registry name (``canary``, ``switchml``, ...)."""
        if not self._h:
            raise ValueError("session: closed")
        return str(self._lib.RL_Innet_protocol(self._h).decode())

    def allreduce(self, array: Any) -> Any:
        """The element-wise sum over all ranks of `array` (int32 or float32, any shape; the same on
        every rank) as a new array of that dtype and shape."""
        import ctypes

        import numpy as np

        if not self._h:
            raise ValueError("session: closed")
        a = np.ascontiguousarray(array)
        kinds = {np.dtype(np.int32): 0, np.dtype(np.float32): 1}
        if a.dtype not in kinds:
            raise ValueError(f"array: dtype {a.dtype}; sessions reduce int32 or float32")
        out = np.empty_like(a)
        err = ctypes.create_string_buffer(2048)
        rc = self._lib.RL_Innet_allreduce(self._h, a.ctypes.data, out.ctypes.data, a.size, kinds[a.dtype], err, len(err))
        if rc != 0:
            msg = err.value.decode(errors="replace")
            raise (ValueError if msg.startswith(("data:", "count:", "element_type:")) else RuntimeError)(msg)
        return out

    def close(self) -> None:
        if self._h:
            self._lib.RL_Innet_close(self._h)
            self._h = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            self.close()


def _library(path: str | os.PathLike[str] | None) -> Any:
    import ctypes

    from . import swswitch

    p = Path(path or os.environ.get("REDUCELAB_INNET_LIB") or swswitch.find_binary().parent / "libreducelab_innet.so")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: not built; run `cargo build --release -p reducelab-innet`")
    lib = ctypes.CDLL(str(p))
    lib.RL_Innet_open.restype = ctypes.c_void_p
    lib.RL_Innet_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_double,
                                  ctypes.c_char_p, ctypes.c_size_t]
    lib.RL_Innet_allreduce.restype = ctypes.c_int
    lib.RL_Innet_allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32,
                                       ctypes.c_char_p, ctypes.c_size_t]
    lib.RL_Innet_close.argtypes = [ctypes.c_void_p]
    lib.RL_Innet_protocol.restype = ctypes.c_char_p
    lib.RL_Innet_protocol.argtypes = [ctypes.c_void_p]
    return lib
