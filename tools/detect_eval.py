#!/usr/bin/env python3
"""detect_eval.py: `iris detect` on held-out demo scenes, scored against the generator's geometry.

For each evaluation scene (seed EVAL_FIRST + i of tools/demo_seeds.py: outside every training
range), each group of
identical objects (shape, colour) is asked for with `iris detect IMAGE "COLOUR SHAPE"` (the CLI's
grounding prompt, Qwen's cookbook form); the boxes printed (pixels of the scene) are matched one to
one, greedily by IoU, with the objects' true boxes: the tight box of each shape's own outline
(tools/demo_data.py's _inside at 8x8 samples per pixel; occlusion by a later shape ignored).  An
object counts as found when its match has IoU >= 0.5.

  /usr/bin/python3 tools/detect_eval.py [--n 100] [--iris build/iris] [--model models/demo] [--out FILE]
                                        [--every]

--every asks once per scene for every object (`iris detect IMAGE objects`, the page's "find objects"
in the category form) and matches its boxes with all of the scene's objects.

Prints one line per scene with --verbose, and at the end the figures as JSON: objects, found
(IoU >= 0.5) and the fraction, boxes returned, precision, mean IoU of the matches, the number of
queries that gave no box (exit 1 of iris detect) and that failed otherwise.  numpy only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_data as dd  # noqa: E402
import demo_seeds  # noqa: E402

HELD_OUT = demo_seeds.EVAL_FIRST


def true_box(o, w, h):
    """[x1, y1, x2, y2] in pixels (edges, as a box drawn around the shape) of one object."""
    r, cx, cy = o["r"], o["x"], o["y"]
    ss = 8
    xs = np.arange(max(int(cx - r) - 1, 0) * ss, min(int(cx + r) + 2, w) * ss) / ss + 0.5 / ss
    ys = np.arange(max(int(cy - r) - 1, 0) * ss, min(int(cy + r) + 2, h) * ss) / ss + 0.5 / ss
    U, V = np.meshgrid((xs - cx) / r, (ys - cy) / r)
    m = dd._inside(o["shape"], U, V)
    yy, xx = np.nonzero(m)
    return [float(xs[xx.min()]), float(ys[yy.min()]), float(xs[xx.max()]), float(ys[yy.max()])]


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match(truth, pred):
    """Greedy one-to-one matching by IoU: the IoU of each true box's match (0 when unmatched)."""
    pairs = sorted(((iou(t, p), i, j) for i, t in enumerate(truth) for j, p in enumerate(pred)), reverse=True)
    used_t, used_p, best = set(), set(), [0.0] * len(truth)
    for v, i, j in pairs:
        if v <= 0 or i in used_t or j in used_p:
            continue
        used_t.add(i)
        used_p.add(j)
        best[i] = v
    return best


def detect(args, png, query):
    """(boxes, status): boxes as printed by iris detect, status 'ok', 'none' (exit 1) or 'error'."""
    cmd = [args.iris, "detect", "-q", "-m", args.model, png, query]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode == 1 and "no boxes" in p.stderr:
        return [], "none"
    if p.returncode != 0:
        return [], "error: " + p.stderr.strip()[-200:]
    return [d["box"] for d in json.loads(p.stdout) if "box" in d], "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="held-out scenes (default 100)")
    ap.add_argument("--iris", default="build/iris")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--out", help="also write the figures (JSON) to this file")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--every", action="store_true", help="one query a scene for every object")
    args = ap.parse_args()
    objects = found = returned = none = errors = 0
    ious = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.n):
            seed = HELD_OUT + i
            sc = dd.make_scene(seed)
            png = os.path.join(tmp, f"{seed}.png")
            dd.write_png(png, dd.render(sc))
            queries = [(None, None, "objects")] if args.every else \
                [(shape, colour, f"{colour} {shape}") for shape, colour, _k in dd.groups_of(sc)]
            for shape, colour, query in queries:
                truth = [true_box(o, sc["w"], sc["h"]) for o in sc["objects"]
                         if shape is None or (o["shape"] == shape and o["colour"] == colour)]
                try:
                    pred, status = detect(args, png, query)
                except Exception as e:  # one failure must not lose the rest
                    pred, status = [], f"error: {e}"
                none += status == "none"
                if status.startswith("error"):
                    errors += 1
                    print(f"seed {seed} {query}: {status}", file=sys.stderr)
                best = match(truth, pred)
                objects += len(truth)
                returned += len(pred)
                found += sum(v >= 0.5 for v in best)
                ious += [v for v in best if v > 0]
                if args.verbose:
                    print(f"seed {seed} {query}: truth {[[round(v) for v in t] for t in truth]} "
                          f"pred {pred} iou {[round(v, 2) for v in best]}")
    good = sum(v >= 0.5 for v in ious)
    res = {"scenes": args.n, "objects": objects, "found_iou50": found,
           "found_fraction": round(found / objects, 4) if objects else 0.0,
           "boxes_returned": returned, "precision_iou50": round(good / returned, 4) if returned else 0.0,
           "mean_iou_matched": round(float(np.mean(ious)), 4) if ious else 0.0,
           "queries_without_boxes": none, "queries_failed": errors, "model": args.model,
           "query": "every object, one query a scene" if args.every else "each (colour, shape) group"}
    print(json.dumps(res))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
