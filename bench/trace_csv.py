"""trace_csv.py: the GPU activity rows of a kernel trace, for bench/ttft_profile.py and
bench/decode_profile.py: the CSV of tools/cupti_trace.c or of `nsys stats -r cuda_gpu_trace -f csv`
(columns "Start (ns)", "Duration (ns)", "Name", and "Grid" where the tool gives it)."""
import csv


def read_rows(path):
    """[(start_ns, duration_ns, name, grid)] sorted by start; grid is "" where the trace has none."""
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            try:
                s, d = float(r["Start (ns)"]), float(r["Duration (ns)"])
            except (KeyError, ValueError):
                continue
            rows.append((s, d, r.get("Name", "?"), r.get("Grid") or ""))
    rows.sort()
    return rows
