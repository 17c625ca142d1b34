#!/usr/bin/env python3
"""Writes scenarios/examples/stencil_allreduce.goal: an application-like GOAL trace of P ranks on
a 1-D periodic domain. Each of ITERS iterations computes (calc), exchanges halos with both
neighbours (send/recv, one tag per direction and iteration), computes on the halos, then
allreduces a residual by recursive doubling (log2 P steps of send/recv, a reduction calc after
each). Usage: make-stencil-goal.py [P ITERS HALO_BYTES RESIDUAL_BYTES] > FILE
"""
import sys


def main() -> None:
    p, iters, halo, res = (int(x) for x in (sys.argv[1:5] if len(sys.argv) == 5 else (8, 3, 65536, 4096)))
    if p < 2 or p & (p - 1):
        sys.exit("P must be a power of two of at least 2 (recursive doubling)")
    out = [f"// stencil (1-D halo exchange, {halo} B per side) + recursive-doubling allreduce ({res} B),",
           f"// {iters} iterations on {p} ranks; written by scripts/make-stencil-goal.py",
           f"num_ranks {p}"]
    for r in range(p):
        out.append(f"rank {r} {{")
        prev = None
        left, right = (r - 1) % p, (r + 1) % p
        for it in range(iters):
            def op(label: str, text: str, *deps: str) -> str:
                out.append(f"i{it}_{label}: {text}")
                for d in deps:
                    out.append(f"i{it}_{label} requires {d}")
                return f"i{it}_{label}"
            c = op("compute", "calc 20000", *([prev] if prev else []))
            sl = op("sendl", f"send {halo}b to {left} tag {2 * it}", c)
            sr = op("sendr", f"send {halo}b to {right} tag {2 * it + 1}", c)
            rl = op("recvl", f"recv {halo}b from {left} tag {2 * it + 1}", c)
            rr = op("recvr", f"recv {halo}b from {right} tag {2 * it}", c)
            h = op("halo", "calc 2000", sl, sr, rl, rr)
            last = h
            step, k = 1, 0
            while step < p:
                peer = r ^ step
                tag = 1000 + 100 * it + k
                s = op(f"ar{k}s", f"send {res}b to {peer} tag {tag}", last)
                v = op(f"ar{k}r", f"recv {res}b from {peer} tag {tag}", last)
                last = op(f"ar{k}c", f"calc {res // 64}", s, v)
                step, k = step * 2, k + 1
            prev = last
        out.append("}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
