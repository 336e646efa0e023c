#!/usr/bin/env python3
"""demo_caption_errors.py: where the demo model's captions fail, from an evaluation's eval.json.

  /usr/bin/python3 tools/demo_caption_errors.py EVAL_DIR/eval.json        (transformers' outputs)
  /usr/bin/python3 tools/demo_caption_errors.py EVAL_DIR/iris_eval.json   (iris's: train_demo.py iris-eval)

For the captions that do not name every object (metric names_all), compares the multiset of
(colour, shape) a caption names with the scene's: failures where only shapes differ (and which
shape became which, paired by colour), where a colour differs, where the object count differs;
then caption accuracy by the radius of the scene's smallest object and by its object count.
Reads only the files train_demo.py's evaluations write (items and scenes, in image order)."""
import collections
import json
import re
import sys

NUM = {"a": 1, "an": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
SHAPES = ["circle", "square", "triangle", "star", "hexagon", "diamond"]


def named(caption):
    """The (colour, shape) multiset of "A red circle, two blue squares and ... on a ... background." """
    ms = collections.Counter()
    for part in re.split(r", | and ", caption.split(" on ")[0]):
        w = part.lower().split()
        if len(w) < 3 or w[0] not in NUM:
            continue
        shape = w[-1][:-1] if w[-1].endswith("s") and w[-1][:-1] in SHAPES else w[-1]
        if shape in SHAPES:
            ms[(w[1], shape)] += NUM[w[0]]
    return ms


def main():
    d = json.load(open(sys.argv[1]))
    if "scenes" not in d:              # iris_eval.json: the scenes are in eval.json beside it
        d["scenes"] = json.load(open(sys.argv[1].replace("iris_eval.json", "eval.json")))["scenes"]
    iris = "summary" in d
    scenes = d["scenes"]
    caps = [it for it in d["items"] if it["task"] == "caption"]
    kinds, swaps = collections.Counter(), collections.Counter()
    by_r, by_n = collections.defaultdict(lambda: [0, 0]), collections.defaultdict(lambda: [0, 0])
    for c in caps:
        sc = scenes[c["image"]]  # scenes are keyed by their image's file name
        ok = c["iris_metrics" if iris else "metrics"]["names_all"]
        r = int(min(o["r"] for o in sc["objects"]) // 5 * 5)
        by_r[r][0] += ok
        by_r[r][1] += 1
        by_n[len(sc["objects"])][0] += ok
        by_n[len(sc["objects"])][1] += 1
        if ok:
            continue
        truth, out = named(c["truth"]), named(c["iris" if iris else "output"])
        missing, extra = list((truth - out).elements()), list((out - truth).elements())
        for m in list(missing):
            for e in extra:
                if e[0] == m[0]:
                    swaps[(m[1], e[1])] += 1
                    extra.remove(e)
                    missing.remove(m)
                    break
        if not missing and not extra:
            kinds["a shape only"] += 1
        elif sum(truth.values()) != sum(out.values()):
            kinds["the count"] += 1
        else:
            kinds["a colour (or other)"] += 1
    print(f"{sum(kinds.values())} of {len(caps)} captions do not name every object; wrong: {dict(kinds)}")
    print("shape swaps, same colour (truth -> output):",
          ", ".join(f"{a} -> {b} {n}" for (a, b), n in swaps.most_common(12)))
    print("names every object, by the smallest object's radius (px):",
          ", ".join(f"{r}-{r + 5}: {v[0]}/{v[1]} = {100 * v[0] / v[1]:.0f} %" for r, v in sorted(by_r.items())))
    print("by object count:",
          ", ".join(f"{n}: {v[0]}/{v[1]} = {100 * v[0] / v[1]:.1f} %" for n, v in sorted(by_n.items())))


if __name__ == "__main__":
    main()
