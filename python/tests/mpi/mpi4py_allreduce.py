"""Run under mpirun with LD_PRELOAD=libreducelab_pmpi.so: mpi4py's Allreduce, Iallreduce,
Reduce_scatter_block and Allgather (buffer interface, numpy arrays) and a user-defined
non-commutative op must give the exactly expected results, and the interposition library's
counters (RL_Counters, looked up in the process) must show the calls ran ReduceLab schedules.
Prints one line `mpi4py: OK <calls> <scheduled>` on rank 0, or raises."""

import ctypes
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, p = comm.Get_rank(), comm.Get_size()

lib = ctypes.CDLL(None)
try:
    rl_counters = lib.RL_Counters
except AttributeError:
    sys.exit("RL_Counters not found: the interposition library is not loaded")
rl_counters.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(ctypes.c_longlong)]


def counters() -> tuple[int, int]:
    s, f = ctypes.c_longlong(), ctypes.c_longlong()
    rl_counters(ctypes.byref(s), ctypes.byref(f))
    return s.value, f.value


def data(r: int, n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1000 + r)
    if dtype.startswith("float"):
        return rng.integers(-50, 50, n).astype(dtype)  # exact sums in any order
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


s0, _ = counters()
calls = 0
for n in (0, 1, p - 1 if p > 1 else 2, p + 1, 1000, 65537):
    for dtype in ("int8", "uint8", "int32", "int64", "float32", "float64"):
        inputs = [data(r, n, dtype) for r in range(p)]
        with np.errstate(over="ignore"):
            expect_sum = np.sum(np.stack(inputs), axis=0, dtype=dtype) if n else np.zeros(0, dtype)
        expect_max = np.max(np.stack(inputs), axis=0) if n else np.zeros(0, dtype)
        out = np.empty(n, dtype)
        comm.Allreduce(inputs[rank], out, op=MPI.SUM)
        assert np.array_equal(out, expect_sum), (n, dtype, "sum")
        buf = inputs[rank].copy()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        assert np.array_equal(buf, expect_max), (n, dtype, "max in place")
        req = comm.Iallreduce(inputs[rank], out, op=MPI.SUM)
        req.Wait()
        assert np.array_equal(out, expect_sum), (n, dtype, "iallreduce")
        calls += 3

# reduce-scatter-block and allgather
n = 301
inputs = [data(r, n * p, "int64") for r in range(p)]
with np.errstate(over="ignore"):
    total = np.sum(np.stack(inputs), axis=0, dtype="int64")
out = np.empty(n, "int64")
comm.Reduce_scatter_block(inputs[rank], out, op=MPI.SUM)
assert np.array_equal(out, total[rank * n:(rank + 1) * n]), "reduce_scatter_block"
gathered = np.empty(n * p, "int64")
comm.Allgather(inputs[rank][:n], gathered)
assert np.array_equal(gathered, np.concatenate([x[:n] for x in inputs])), "allgather"
calls += 2


# a non-commutative user op: 2x2 integer matrix product mod 2^64, in rank order
def matmul(a, b, datatype):
    x = np.frombuffer(a, dtype="uint64").reshape(-1, 2, 2)
    y = np.frombuffer(b, dtype="uint64").reshape(-1, 2, 2)
    with np.errstate(over="ignore"):
        y[...] = x @ y  # inout = in · inout (in holds the lower ranks)


op = MPI.Op.Create(matmul, commute=False)
mats = [np.random.default_rng(7 + r).integers(0, 5, (33, 2, 2)).astype("uint64") for r in range(p)]
expect = mats[0].copy()
with np.errstate(over="ignore"):
    for m in mats[1:]:
        expect = expect @ m
mat_t = MPI.UINT64_T.Create_contiguous(4).Commit()  # one element = one matrix
out = np.empty_like(mats[rank])
comm.Allreduce([mats[rank], 33, mat_t], [out, 33, mat_t], op=op)
assert np.array_equal(out, expect), "non-commutative user op"
calls += 1
op.Free()
mat_t.Free()

s1, _ = counters()
assert s1 - s0 >= calls, f"only {s1 - s0} of {calls} calls ran ReduceLab schedules"
total_calls = comm.allreduce(calls)  # pickle-based allreduce, through MPI_Allreduce too
if rank == 0:
    print(f"mpi4py: OK {calls} {s1 - s0} {total_calls}")
