#!/usr/bin/env python3
"""demo_seeds.py: the one table of the demo model's scene seeds (python3 standard library only).

A scene of tools/demo_data.py is a pure function of its seed, so a seed range is a set of scenes.
Every use of scenes has its range here: each training run (its whole range: first scene up to
first + steps x scenes a step), the evaluation, the test fixtures, the examples of `make demo`,
the tokenizer's corpus.  Ranges are half-open [start, end) and pairwise disjoint, except the
nestings listed in LEGACY_NESTED: scenes that earlier sessions used inside a training range before
this table existed (they are kept so that nothing new lands there, and none is used to measure).

tools/train_demo.py asks `guard` before it trains: the scenes of a run must lie inside one
training range and enter no other range; with --seconds the step count is capped so that they
cannot (the cap is the room left in the range).  A new run first gets its own training range here.

  python3 tools/demo_seeds.py check        the ranges are disjoint (but LEGACY_NESTED) and the
                                            guard refuses what it must; exit 0, else 1
  python3 tools/demo_seeds.py list         the table
  python3 tools/demo_seeds.py guard FIRST N_SCENES
                                            exit 0 if scenes [FIRST, FIRST + N_SCENES) may be trained on
"""
import sys

M = 1_000_000

# Runs 1-21 (models/demo/README.md and docs/demo-training.md): (run, first scene, scenes seen).
PAST_RUNS = [(1, 0, 43_824), (2, 1 * M, 228_000), (3, 2 * M, 85_152), (4, 3 * M, 237_600), (5, 4 * M, 70_560),
             (6, 5 * M, 173_568), (7, 6 * M, 271_200), (8, 7 * M, 280_416), (9, 8 * M, 298_848),
             (10, 9 * M, 237_984), (11, 10 * M, 232_416), (12, 11 * M, 229_728), (13, 12 * M, 318_240),
             (14, 13 * M, 198_624), (15, 14 * M, 341_664), (16, 15 * M, 272_352), (17, 16 * M, 314_880),
             (18, 17 * M, 131_040), (19, 18 * M, 209_472), (20, 19 * M, 244_128), (21, 20 * M, 247_200)]

# (name, kind, start, end): kind "train" may be trained on, every other kind may not.
RANGES = [("run%d" % r, "train", a, a + n) for r, a, n in PAST_RUNS] + [
    # runs 22-27 (each from the previous run's weights, with grounding): a million each
    ("run22", "train", 21 * M, 22 * M),
    ("run23", "train", 22 * M, 23 * M),
    ("run24", "train", 23 * M, 24 * M),
    ("run25", "train", 24 * M, 25 * M),
    ("run26", "train", 25 * M, 26 * M),
    ("run27", "train", 26 * M, 27 * M),
    # later runs: give each its own range out of this one before training
    ("train-later", "train", 27 * M, 40 * M),
    # the evaluation: scenes 40,000,000 + i (the card's figures; issue 29 measured the first 500)
    ("eval", "eval", 40 * M, 40 * M + 100_000),
    # test fixtures: tests/fixtures/demo (greedy.json's scenes, the grounding scene of make test)
    ("fixtures", "fixture", 41 * M, 41 * M + 1_000),
    # the tokenizer's corpus (train_demo.py corpus())
    ("tokenizer", "tokenizer", 1_000 * M, 1_000 * M + 3_000),
    # before this table: the first "held-out" scenes (runs 1-21's evaluation and the greedy fixture
    # of run 21, 10,000,000-10,000,019), inside run 11's training range; retired
    ("old-heldout", "retired", 10 * M, 10 * M + 1_000),
    # `make demo`'s examples (demo_data.py EXAMPLE_SEEDS 101-113), inside run 1's training range
    ("examples", "examples", 101, 114),
]
LEGACY_NESTED = {("old-heldout", "run11"), ("examples", "run1")}

EVAL_FIRST = 40 * M
FIXTURE_FIRST = 41 * M
TOKENIZER_FIRST = 1_000 * M


def by_name(name):
    for r in RANGES:
        if r[0] == name:
            return r
    raise KeyError(name)


def overlaps(a, b):
    return a[2] < b[3] and b[2] < a[3]


def problems():
    """What is wrong with the table: [] when every pair is disjoint but the declared nestings."""
    out = []
    for i, a in enumerate(RANGES):
        if not a[2] < a[3]:
            out.append(f"{a[0]}: empty or reversed [{a[2]}, {a[3]})")
        for b in RANGES[i + 1:]:
            if not overlaps(a, b):
                continue
            pair = (a[0], b[0]) if (a[0], b[0]) in LEGACY_NESTED else (b[0], a[0])
            inner, outer = by_name(pair[0]), by_name(pair[1])
            if pair not in LEGACY_NESTED:
                out.append(f"{a[0]} [{a[2]}, {a[3]}) overlaps {b[0]} [{b[2]}, {b[3]})")
            elif not (outer[2] <= inner[2] and inner[3] <= outer[3]):
                out.append(f"{inner[0]} is declared nested in {outer[0]} but is not inside it")
    return out


def guard(first, n_scenes):
    """None if scenes [first, first + n_scenes) may be trained on, else the reason they may not."""
    run = ("run", "train", int(first), int(first) + int(n_scenes))
    if n_scenes <= 0:
        return f"no scenes ({n_scenes})"
    home = [r for r in RANGES if r[1] == "train" and r[2] <= run[2] < r[3]]
    if not home:
        return f"scene {first} is in no training range of tools/demo_seeds.py (give the run one there first)"
    if run[3] > home[0][3]:
        return (f"scenes {first}-{run[3] - 1} run past the end of training range {home[0][0]} "
                f"[{home[0][2]}, {home[0][3]}) by {run[3] - home[0][3]} scenes")
    for r in RANGES:
        if r[1] != "train" and overlaps(run, r):
            return f"scenes {first}-{run[3] - 1} enter {r[0]} ({r[1]}, [{r[2]}, {r[3]}))"
    return None


def room(first):
    """Scenes from `first` to the end of its training range (0 if it is in none)."""
    home = [r for r in RANGES if r[1] == "train" and r[2] <= first < r[3]]
    return home[0][3] - first if home else 0


def self_check():
    """The table's problems plus the guard's own: what it must refuse and what it must allow."""
    out = problems()
    cases = [(10 * M, 96 * 100, False),          # run 11's range, into the old held-out scenes
             (EVAL_FIRST, 96, False),            # the evaluation
             (EVAL_FIRST - 96 * 10, 96 * 11, False),   # a training range running into the evaluation
             (FIXTURE_FIRST + 5, 10, False),     # a fixture
             (TOKENIZER_FIRST, 10, False),       # the tokenizer corpus
             (50, 100, False),                   # make demo's examples
             (500_000, 96, False),               # a gap: no training range
             (21 * M, 96 * 2_000, True),         # run 22
             (21 * M + 900_000, 96 * 2_000, False)]   # run 22 past its end
    for first, n, ok in cases:
        why = guard(first, n)
        if (why is None) != ok:
            out.append(f"guard({first}, {n}) {'refused: ' + why if why else 'allowed'}; expected "
                       f"{'allowed' if ok else 'refused'}")
    return out


def main():
    a = sys.argv[1:]
    if a[:1] == ["check"]:
        bad = self_check()
        for b in bad:
            print("demo_seeds:", b)
        print(f"demo_seeds: {len(RANGES)} ranges, {'OK' if not bad else str(len(bad)) + ' problems'}")
        sys.exit(1 if bad else 0)
    elif a[:1] == ["list"]:
        for name, kind, s, e in sorted(RANGES, key=lambda r: r[2]):
            print(f"{name:12s} {kind:10s} {s:>13,} - {e - 1:>13,}  ({e - s:,} scenes)")
    elif a[:1] == ["guard"] and len(a) == 3:
        why = guard(int(a[1]), int(a[2]))
        print("allowed" if why is None else "refused: " + why)
        sys.exit(0 if why is None else 1)
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
