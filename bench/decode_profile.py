#!/usr/bin/env python3
"""decode_profile.py: where a decode step's time goes, from a kernel trace of `iris bench`.

    CUDA_INJECTION64_PATH=$PWD/build/gpu/libcupti_trace.so IRIS_TRACE_OUT=t.csv \\
        build/gpu/iris bench DIR --batch 1 --prompt-tokens 1024 --gen-tokens 64
    python3 bench/decode_profile.py t.csv [MARKER]

(the CSV of tools/cupti_trace.c, or of `nsys stats -r cuda_gpu_trace -f csv`).

Decode steps are found by MARKER, a kernel name part that runs once a step (default
"k_topk_merge": the sampling's last kernel, once a step).  Over the last half of the steps
of the trace's last run of equal steps (the decode loop of the last batch size), it prints
per kernel name: calls a step, mean duration, and "exposed" time: the advance of the chain's
end (end - the previous kernel's end, kernels in start order), which is what a kernel costs
the step when the next one starts early (programmatic dependent launch) and waits for it.
The step's first kernel (the embedding gather) also carries the host's time between steps
(sampling, the next step's upload and graph launch), inflated by the tracing itself.
Copies are left out (their number varies with sampling)."""
import signal
import sys
from collections import defaultdict

from trace_csv import read_rows

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly

# kernels only: the copies' number varies with sampling
rows = [(s, d, n) for s, d, n, _ in read_rows(sys.argv[1]) if not n.startswith(("memcpy", "api ")) and n != "memset"]
marker = sys.argv[2] if len(sys.argv) > 2 else "k_topk_merge"
starts = [i for i, (_, _, n) in enumerate(rows) if marker in n]
if len(starts) < 4:
    sys.exit(f"decode_profile: {len(starts)} '{marker}' kernels in the trace")
# steps of the same kernel count, from the end backwards: the last decode loop
steps = []
for a, b in zip(starts[-2::-1], starts[:0:-1]):
    if steps and b - a != steps[0][1] - steps[0][0]:
        break
    steps.insert(0, (a, b))
steps = steps[len(steps) // 2:]
n = len(steps)
calls, dur, exp = defaultdict(int), defaultdict(float), defaultdict(float)
span = 0.0
for a, b in steps:
    end = rows[a][0]
    for s, d, name in rows[a:b]:
        k = name[:100]
        calls[k] += 1
        dur[k] += d
        e = s + d
        exp[k] += max(0.0, e - end)
        end = max(end, e)
    span += rows[b][0] - rows[a][0]
print(f"{n} steps of {b - a} kernels, {span / n / 1e3:.1f} us a step (marker to marker)")
print(f"{'exposed us':>10} {'mean us':>8} {'calls':>6}  kernel (per step)")
for k in sorted(exp, key=lambda k: -exp[k]):
    print(f"{exp[k] / n / 1e3:10.1f} {dur[k] / calls[k] / 1e3:8.2f} {calls[k] / n:6.0f}  {k}")
print(f"{sum(exp.values()) / n / 1e3:10.1f} exposed in all; busy {sum(dur.values()) / n / 1e3:.1f} us")
