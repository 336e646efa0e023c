#!/usr/bin/env python3
"""ds_trace.py FILE: where a decode step's time went in the persistent decode kernel.

FILE is what IRIS_CUDA_DS_TRACE wrote (cuda_decode_launch.cu): a header (grid, layers, events) and every
CTA's globaltimer stamps at the end of each phase of each layer.  Prints, per phase, the mean over
the middle layers of (the latest CTA's stamp - the latest CTA's previous stamp): the phase's share
of the critical path; and the mean per-CTA time in it (how long a CTA itself spent there)."""
import struct
import sys

NAMES = ["norm 1", "q/k/v GEMV", "attention", "barrier", "copy o", "o GEMV", "barrier",
         "norm 2", "gate/up GEMV", "barrier", "copy g", "down GEMV", "barrier"]


def main():
    data = open(sys.argv[1], "rb").read()
    grid, layers, ev = struct.unpack_from("3i", data, 0)
    if ev != len(NAMES):
        sys.exit("ds_trace: %d stamps a layer, not the kernel's %d" % (ev, len(NAMES)))
    n = grid * layers * ev
    t = struct.unpack_from("%dQ" % n, data, 12)
    at = lambda b, l, e: t[(b * layers + l) * ev + e]
    mid = range(1, layers - 1) if layers > 2 else range(layers)
    crit = [0.0] * ev
    own = [0.0] * ev
    for l in mid:
        for e in range(ev):
            prev = (l, e - 1) if e else (l - 1, ev - 1)
            if prev[0] < 0:
                continue
            last = max(at(b, l, e) for b in range(grid))
            last_prev = max(at(b, prev[0], prev[1]) for b in range(grid))
            crit[e] += (last - last_prev) / len(mid) / 1000
            own[e] += sum(at(b, l, e) - at(b, prev[0], prev[1]) for b in range(grid)) / grid / len(mid) / 1000
    first = min(at(b, 0, 0) for b in range(grid))
    end = max(at(b, layers - 1, ev - 1) for b in range(grid))
    print("grid %d, %d layers; first stamp to last %.1f us (%.2f us a layer)" % (grid, layers, (end - first) / 1000,
                                                                               (end - first) / 1000 / layers))
    print("%-14s %10s %10s" % ("phase", "path us", "per-CTA us"))
    for e in range(ev):
        print("%-14s %10.2f %10.2f" % (NAMES[e], crit[e], own[e]))
    print("%-14s %10.2f" % ("layer", sum(crit)))


if __name__ == "__main__":
    main()
