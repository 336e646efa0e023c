#!/usr/bin/env python3
"""ttft_profile.py: where the GPU time of one `iris bench --image` time-to-first-token run goes.

    nsys profile -o P build/gpu/iris bench DIR --batch 1 --prompt-tokens 16 --gen-tokens 2 --image 1024x1024
    nsys stats -r cuda_gpu_trace -f csv -o P P.nsys-rep
    python3 bench/ttft_profile.py P_cuda_gpu_trace.csv [GAP_MS] [TIMELINE_OUT]

or, without Nsight Systems, the CSV of tools/cupti_trace.c.

The last image run is the process's last burst of GPU work: the kernels after the last idle gap
longer than GAP_MS (default 3 ms).  Prints that window's span, its idle time, and the kernels (and
copies) summed by name, longest first."""
import sys
from collections import defaultdict

from trace_csv import read_rows

rows = [(s, d, n[:90] + (f" [{g}]" if g else "")) for s, d, n, g in read_rows(sys.argv[1])]
gap = float(sys.argv[2]) * 1e6 if len(sys.argv) > 2 else 3e6
cut = 0
end = rows[0][0] + rows[0][1]
for i in range(1, len(rows)):
    if rows[i][0] - end > gap:
        cut = i
    end = max(end, rows[i][0] + rows[i][1])
win = rows[cut:]
t0, t1 = win[0][0], max(s + d for s, d, _ in win)
busy = sum(d for _, d, _ in win)
print(f"window: {len(win)} GPU ops, span {(t1 - t0) / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms")
# phases: idle gaps > 0.2 ms inside the window
end, start = win[0][0] + win[0][1], win[0][0]
for s, d, n in win[1:]:
    if s - end > 2e5:
        print(f"  gap {(s - end) / 1e6:.3f} ms at +{(end - t0) / 1e6:.3f} ms")
    end = max(end, s + d)
tot = defaultdict(lambda: [0.0, 0])
for s, d, n in win:
    k = n[:110]
    tot[k][0] += d
    tot[k][1] += 1
for k, (d, c) in sorted(tot.items(), key=lambda x: -x[1][0])[:40]:
    print(f"{d / 1e6:8.3f} ms {c:5d}x  {k}")
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        for s, d, n in win:
            f.write(f"{(s - t0) / 1e3:10.1f} us {d / 1e3:8.1f} us  {n[:140]}\n")
