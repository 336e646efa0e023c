#!/usr/bin/env python3
"""demo_data.py: synthetic scenes for the demo model (numpy only; PIL not needed).

A scene is 1-6 shapes (circle, square, triangle, star, hexagon, diamond) in named colours and
three sizes, placed in the cells of a 3x3 grid (overlaps allowed, every shape stays visible), on a
plain (white, black, gray, beige) or textured (striped, checkered, dotted, gradient) background,
sometimes with a short word drawn with a built-in 5x7 bitmap font (so rendering does not depend on
the fonts or the Pillow version of the machine).  Image sides are 80-256 px, any aspect ratio in
that range.  Everything is a pure function of the seed (numpy's PCG64).

Four tasks (the prompts of the caption and describe tasks are the CLI's fixed prompts,
src/cli/cmd_run.c CAPTION_PROMPT / DESCRIBE_PROMPT):
  caption   "Two red circles and a blue square on a white background."
  vqa       short answers: counts (digits), colours, shapes, left-of (yes/no), where, the text
  analysis  a structured list of the objects with colour, size and position
  grounding "Locate every red circle." answered as Qwen3-VL answers it (its cookbook's format):
            ```json / [ / TAB{"bbox_2d": [x1, y1, x2, y2], "label": "red circle"}, ... / ] / ```
            with the corners on a 0-1000 scale relative to the image as given (x * 1000 / width,
            rounded), from the shapes' own geometry (the box of the drawn outline, in the image)

Also the scorers used by the evaluation (transformers and iris alike).

  /usr/bin/python3 tools/demo_data.py show SEED          prints one scene's texts
  /usr/bin/python3 tools/demo_data.py png SEED OUT.png   writes one scene's image
  /usr/bin/python3 tools/demo_data.py examples DIR       writes the demo images for `make demo`
  /usr/bin/python3 tools/demo_data.py grounding SEED DIR writes DIR/SEED.png and DIR/SEED.json (its objects'
                                                          boxes in pixels and on 0-1000, the grounding answer)
"""
import json
import os
import re
import struct
import sys
import zlib

import numpy as np

SHAPES = ["circle", "square", "triangle", "star", "hexagon", "diamond"]
PLURAL = {s: s + "s" for s in SHAPES}
COLOURS = {"red": (220, 35, 35), "green": (35, 160, 55), "blue": (35, 75, 225), "yellow": (240, 210, 25),
           "orange": (245, 130, 25), "purple": (130, 50, 175), "pink": (245, 125, 195),
           "brown": (125, 75, 35), "black": (20, 20, 20), "white": (248, 248, 248)}
COLOUR_NAMES = list(COLOURS)
PLAIN = {"white": (250, 250, 250), "black": (18, 18, 18), "gray": (128, 128, 128), "beige": (226, 212, 178)}
TEXTURES = ["striped", "checkered", "dotted", "gradient"]
BACKGROUNDS = list(PLAIN) + TEXTURES
SIZES = {"small": (0.065, 0.085), "medium": (0.105, 0.13), "large": (0.165, 0.2)}   # radius / min side
SIZE_NAMES = list(SIZES)
POSITIONS = [["top left", "top", "top right"], ["left", "center", "right"],
             ["bottom left", "bottom", "bottom right"]]
NUMBER_WORDS = ["no", "a", "two", "three", "four", "five", "six"]
WORDS = ["CAT", "DOG", "SUN", "STOP", "GO", "HI", "IRIS", "OK", "YES", "NO", "MAP", "BOX", "FISH", "MOON",
         "TREE", "BIRD"]
# Colours that do not show on a background (never drawn there).
CLASH = {"white": {"white"}, "beige": {"white", "yellow"}, "black": {"black", "brown"}, "gray": set(),
         "striped": {"white"}, "checkered": {"white"}, "dotted": {"white"}, "gradient": {"white"}}

CAPTION_PROMPT = "Describe this image in one sentence."
DESCRIBE_PROMPT = ("Analyze this scene. List the objects you see with their colours and positions, describe the "
                   "setting and any activities, and transcribe any visible text.")

# 5x7 bitmap font: 7 rows of 5 bits per letter (bit 4 = leftmost column).
FONT = {
    "A": [14, 17, 17, 31, 17, 17, 17], "B": [30, 17, 17, 30, 17, 17, 30], "C": [14, 17, 16, 16, 16, 17, 14],
    "D": [30, 17, 17, 17, 17, 17, 30], "E": [31, 16, 16, 30, 16, 16, 31], "F": [31, 16, 16, 30, 16, 16, 16],
    "G": [14, 17, 16, 23, 17, 17, 15], "H": [17, 17, 17, 31, 17, 17, 17], "I": [14, 4, 4, 4, 4, 4, 14],
    "K": [17, 18, 20, 24, 20, 18, 17], "M": [17, 27, 21, 21, 17, 17, 17], "N": [17, 25, 21, 19, 17, 17, 17],
    "O": [14, 17, 17, 17, 17, 17, 14], "P": [30, 17, 17, 30, 16, 16, 16], "R": [30, 17, 17, 30, 20, 18, 17],
    "S": [15, 16, 16, 14, 1, 1, 30], "T": [31, 4, 4, 4, 4, 4, 4], "U": [17, 17, 17, 17, 17, 17, 14],
    "W": [17, 17, 17, 21, 21, 21, 10], "X": [17, 17, 10, 4, 10, 17, 17], "Y": [17, 17, 10, 4, 4, 4, 4],
}

# ---------------------------------------------------------------------------------------------
# scene layout


def _rng(seed):
    return np.random.default_rng([int(seed), 20250917])


def make_scene(seed):
    """The scene description for a seed (no pixels): a dict, JSON-serialisable."""
    rng = _rng(seed)
    for _ in range(100):
        s = _try_scene(rng)
        if s is not None:
            s["seed"] = int(seed)
            return s
    raise RuntimeError(f"seed {seed}: no layout found")


def _side(rng, lo, hi):
    if rng.random() < 0.6:                      # a multiple of 32 (no resize in preprocessing)
        return int(32 * rng.integers((lo + 31) // 32, hi // 32 + 1))
    return int(rng.integers(lo, hi + 1))


def _try_scene(rng):
    n = int(rng.choice(np.arange(1, 7), p=[0.12, 0.17, 0.19, 0.18, 0.17, 0.17]))
    lo = 80 if n <= 2 else 112
    h, w = _side(rng, lo, 256), _side(rng, lo, 256)
    S = min(h, w)
    bg = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    allowed = [c for c in COLOUR_NAMES if c not in CLASH[bg]]
    # groups of identical (shape, colour)
    groups, left = [], n
    while left > 0:
        k = int(rng.integers(1, left + 1)) if rng.random() < 0.6 else 1
        for _ in range(20):
            key = (SHAPES[int(rng.integers(len(SHAPES)))], allowed[int(rng.integers(len(allowed)))])
            if key not in [g[0] for g in groups]:
                break
        else:
            return None
        groups.append((key, k))
        left -= k
    text = None
    occupied = []
    if w >= 128 and rng.random() < 0.3:
        word = WORDS[int(rng.integers(len(WORDS)))]
        scale = 3 if w >= 176 and rng.random() < 0.7 else 2
        tw, th = (6 * len(word) - 1) * scale, 7 * scale
        if tw + 8 > w:
            return None
        tx, ty = int(rng.integers(4, w - tw - 4 + 1)), int(rng.integers(4, h - th - 4 + 1))
        text = {"word": word, "x": tx, "y": ty, "scale": scale}
        occupied.append((tx - 3, ty - 3, tx + tw + 3, ty + th + 3))
    objs = []
    for (shape, colour), k in groups:
        for _ in range(k):
            size = SIZE_NAMES[int(rng.integers(3))]
            a, b = SIZES[size]
            r = max(6.0, float(rng.uniform(a, b)) * S)
            for _ in range(60):
                row, col = int(rng.integers(3)), int(rng.integers(3))
                # centre inside the cell's inner 70%, and the shape inside the image
                x0, x1 = w * (col + 0.15) / 3, w * (col + 0.85) / 3
                y0, y1 = h * (row + 0.15) / 3, h * (row + 0.85) / 3
                x0, x1 = max(x0, r + 1), min(x1, w - r - 1)
                y0, y1 = max(y0, r + 1), min(y1, h - r - 1)
                if x0 >= x1 or y0 >= y1:
                    continue
                cx, cy = float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))
                if any((cx - o["x"]) ** 2 + (cy - o["y"]) ** 2 < (0.8 * (r + o["r"])) ** 2 for o in objs):
                    continue
                if any(cx + r > bx0 and cx - r < bx1 and cy + r > by0 and cy - r < by1
                       for bx0, by0, bx1, by1 in occupied):
                    continue
                jit = [int(v) for v in rng.integers(-12, 13, 3)]
                objs.append({"shape": shape, "colour": colour, "size": size, "x": round(cx, 2), "y": round(cy, 2),
                             "r": round(r, 2), "row": row, "col": col, "position": POSITIONS[row][col],
                             "jitter": jit})
                break
            else:
                return None
    tex = {"kind": bg, "seed": int(rng.integers(1 << 30))}
    return {"h": h, "w": w, "background": bg, "texture": tex, "objects": objs, "text": text}

# ---------------------------------------------------------------------------------------------
# rendering


def _background(scene):
    h, w, bg = scene["h"], scene["w"], scene["background"]
    if bg in PLAIN:
        return np.broadcast_to(np.array(PLAIN[bg], np.float64), (h, w, 3)).copy()
    rng = np.random.default_rng(scene["texture"]["seed"])
    c1 = rng.uniform(175, 235, 3)
    c2 = np.clip(c1 - rng.uniform(25, 45) + rng.uniform(-8, 8, 3), 0, 255)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    if bg == "striped":
        period = float(rng.uniform(8, 16))
        ang = float(rng.choice([0.0, 45.0, 90.0, 135.0])) * np.pi / 180
        t = (x * np.cos(ang) + y * np.sin(ang)) / period
        m = (np.floor(t) % 2)[..., None]
    elif bg == "checkered":
        cell = float(rng.uniform(8, 16))
        m = ((np.floor(x / cell) + np.floor(y / cell)) % 2)[..., None]
    elif bg == "dotted":
        step = float(rng.uniform(9, 14))
        dx, dy = (x % step) - step / 2, (y % step) - step / 2
        m = (dx * dx + dy * dy < (step * 0.22) ** 2).astype(np.float64)[..., None]
    else:  # gradient
        ang = float(rng.uniform(0, 2 * np.pi))
        t = (x * np.cos(ang) + y * np.sin(ang))
        m = ((t - t.min()) / max(t.max() - t.min(), 1.0))[..., None]
    return c1 * (1 - m) + c2 * m


def _polygon(shape):
    if shape == "triangle":
        a = np.deg2rad([-90, 30, 150])
        return np.stack([np.cos(a), np.sin(a) + 0.15], 1)
    if shape == "hexagon":
        a = np.deg2rad(np.arange(6) * 60)
        return np.stack([np.cos(a), np.sin(a)], 1)
    if shape == "star":
        a = np.deg2rad(-90 + np.arange(10) * 36)
        rad = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
        return np.stack([rad * np.cos(a), rad * np.sin(a) + 0.08], 1)
    raise ValueError(shape)


def _inside(shape, u, v):
    """Coverage test in the unit frame (u, v) = ((x - cx) / r, (y - cy) / r)."""
    if shape == "circle":
        return u * u + v * v <= 1.0
    if shape == "square":
        return (np.abs(u) <= 0.82) & (np.abs(v) <= 0.82)
    if shape == "diamond":
        return np.abs(u) + np.abs(v) <= 1.05
    poly = _polygon(shape)
    inside = np.zeros(u.shape, bool)
    for i in range(len(poly)):                  # crossing number
        (xa, ya), (xb, yb) = poly[i], poly[(i + 1) % len(poly)]
        cond = (ya > v) != (yb > v)
        xint = xa + (v - ya) * (xb - xa) / np.where(yb == ya, 1e-12, yb - ya)
        inside ^= cond & (u < xint)
    return inside


def render(scene):
    """uint8 [h, w, 3] image of a scene."""
    img = _background(scene)
    h, w = scene["h"], scene["w"]
    ss = 4                                           # 4x4 supersampling at the edges
    off = (np.arange(ss) + 0.5) / ss
    for o in scene["objects"]:
        r, cx, cy = o["r"], o["x"], o["y"]
        xa, xb = max(int(cx - r) - 1, 0), min(int(cx + r) + 2, w)
        ya, yb = max(int(cy - r) - 1, 0), min(int(cy + r) + 2, h)
        ys = (np.arange(ya, yb)[:, None] + off[None, :]).reshape(-1)
        xs = (np.arange(xa, xb)[:, None] + off[None, :]).reshape(-1)
        U, V = np.meshgrid((xs - cx) / r, (ys - cy) / r)
        cov = _inside(o["shape"], U, V).astype(np.float64)
        cov = cov.reshape(yb - ya, ss, xb - xa, ss).mean(axis=(1, 3))[..., None]
        col = np.clip(np.array(COLOURS[o["colour"]], np.float64) + np.array(o["jitter"]), 0, 255)
        img[ya:yb, xa:xb] = img[ya:yb, xa:xb] * (1 - cov) + col * cov
    t = scene["text"]
    if t:
        lum = img.mean()
        ink = np.array([15.0, 15.0, 15.0]) if lum > 110 else np.array([245.0, 245.0, 245.0])
        s, x = t["scale"], t["x"]
        for ch in t["word"]:
            for ry, bits in enumerate(FONT[ch]):
                for cx_ in range(5):
                    if bits >> (4 - cx_) & 1:
                        y0, x0 = t["y"] + ry * s, x + cx_ * s
                        img[y0:y0 + s, x0:x0 + s] = ink
            x += 6 * s
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def png_bytes(rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_png(path, rgb):
    with open(path, "wb") as f:
        f.write(png_bytes(rgb))

# ---------------------------------------------------------------------------------------------
# texts


def groups_of(scene):
    """[(shape, colour, count)] in canonical order (shape list order, then colour list order)."""
    cnt = {}
    for o in scene["objects"]:
        cnt[(o["shape"], o["colour"])] = cnt.get((o["shape"], o["colour"]), 0) + 1
    keys = sorted(cnt, key=lambda k: (SHAPES.index(k[0]), COLOUR_NAMES.index(k[1])))
    return [(s, c, cnt[(s, c)]) for s, c in keys]


def _bg_phrase(bg):
    return f"a {bg} background"


def _number(k, colour):
    return "an" if k == 1 and colour[0] in "aeiou" else NUMBER_WORDS[k]


def caption(scene):
    parts = [f"{_number(k, c)} {c} {PLURAL[s] if k > 1 else s}" for s, c, k in groups_of(scene)]
    body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    out = f"{body} on {_bg_phrase(scene['background'])}"
    if scene["text"]:
        out += f', with the word "{scene["text"]["word"]}"'
    return out[0].upper() + out[1:] + "."


def ordered_objects(scene):
    return sorted(scene["objects"], key=lambda o: (o["row"], o["col"], o["x"], o["y"]))


def analysis(scene):
    lines = [f"Background: {scene['background']}.", f"Objects: {len(scene['objects'])}."]
    for i, o in enumerate(ordered_objects(scene)):
        lines.append(f"{i + 1}. {o['colour']} {o['shape']}, {o['size']}, {o['position']}")
    lines.append(f'Text: "{scene["text"]["word"]}".' if scene["text"] else "Text: none.")
    return "\n".join(lines)

# ---------------------------------------------------------------------------------------------
# grounding


def _extent(shape):
    """(u0, v0, u1, v1): the drawn shape's box in the unit frame of _inside (centre 0, radius 1)."""
    if shape == "circle":
        return -1.0, -1.0, 1.0, 1.0
    if shape == "square":
        return -0.82, -0.82, 0.82, 0.82
    if shape == "diamond":
        return -1.05, -1.05, 1.05, 1.05
    p = _polygon(shape)
    return float(p[:, 0].min()), float(p[:, 1].min()), float(p[:, 0].max()), float(p[:, 1].max())


def pixel_box(scene, o):
    """An object's box [x1, y1, x2, y2] in pixels (pixel i spans [i, i + 1)), clipped to the image."""
    u0, v0, u1, v1 = _extent(o["shape"])
    r, w, h = o["r"], scene["w"], scene["h"]
    return [max(0.0, o["x"] + u0 * r), max(0.0, o["y"] + v0 * r), min(float(w), o["x"] + u1 * r),
            min(float(h), o["y"] + v1 * r)]


def box_1000(scene, o):
    """The box on Qwen3-VL's 0-1000 scale relative to the image: round(x * 1000 / width)."""
    x1, y1, x2, y2 = pixel_box(scene, o)
    w, h = scene["w"], scene["h"]
    return [int(round(x1 * 1000 / w)), int(round(y1 * 1000 / h)), int(round(x2 * 1000 / w)),
            int(round(y2 * 1000 / h))]


def grounding_answer(scene, objs):
    """Qwen3-VL's grounding answer for objects (in reading order), each labelled "colour shape"."""
    if not objs:
        return "```json\n[]\n```"
    rows = ",\n".join('\t{"bbox_2d": [%d, %d, %d, %d], "label": "%s %s"}' % (*box_1000(scene, o), o["colour"],
                                                                               o["shape"]) for o in objs)
    return "```json\n[\n" + rows + "\n]\n```"


GROUND_ALL = "Locate every object."
# "Locate every {q}..." with q singular; Qwen's category prompt (its ODinW evaluation's, single quotes;
# `iris detect`'s and the page's, double quotes) with q singular, plural or "the" + plural
GROUND_EVERY = ["Locate every {q}.", "Locate every {q} in the image, output bbox coordinates in JSON format.",
                "Locate every {q} in the image. Report bbox coordinates in JSON format."]
GROUND_CATEGORIES = ["Locate every instance that belongs to the following categories: '{q}'. "
                     "Report bbox coordinates in JSON format.",
                     'Locate every instance that belongs to the following categories: "{q}". '
                     "Report bbox coordinates in JSON format."]
GROUND_ONE = ["Locate the {q}.", "Locate the {q}, output its bbox coordinates using JSON format."]


def ground_prompt(q, n, rng):
    """A grounding prompt for query q (singular: "red circle", "circle", "red object", "object") that
    n objects answer."""
    k = rng.random()
    if n == 1 and q != "object" and k < 0.2:
        return GROUND_ONE[int(rng.integers(len(GROUND_ONE)))].format(q=q)
    if k < 0.6:
        return GROUND_EVERY[int(rng.integers(len(GROUND_EVERY)))].format(q=q)
    form = [q, q + "s", "the " + q + "s"][int(rng.choice(3, p=[0.5, 0.25, 0.25]))]
    return GROUND_CATEGORIES[int(rng.integers(len(GROUND_CATEGORIES)))].format(q=form)


def detect_prompt(q):
    """`iris detect IMAGE q`'s prompt (src/cli/cmd_detect.c), Qwen's category prompt."""
    return GROUND_CATEGORIES[1].format(q=q)


def grounding(scene, rng):
    """One grounding conversation (prompt, answer): every object, every object of a (colour, shape),
    of a shape or of a colour, or of a (colour, shape) the scene does not have (an empty list)."""
    objs = ordered_objects(scene)
    k = rng.random()
    groups = groups_of(scene)
    if k < 0.4:
        q, sel = "object", objs
    elif k < 0.7:
        s, c, n = groups[int(rng.integers(len(groups)))]
        q, sel = f"{c} {s}", [o for o in objs if o["shape"] == s and o["colour"] == c]
    elif k < 0.82:
        s = objs[int(rng.integers(len(objs)))]["shape"]
        q, sel = s, [o for o in objs if o["shape"] == s]
    elif k < 0.9:
        c = objs[int(rng.integers(len(objs)))]["colour"]
        q, sel = f"{c} object", [o for o in objs if o["colour"] == c]
    else:
        have = {(s, c) for s, c, _ in groups}
        s, c = SHAPES[int(rng.integers(len(SHAPES)))], COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
        q, sel = f"{c} {s}", [] if (s, c) not in have else [o for o in objs if o["shape"] == s and o["colour"] == c]
    return ground_prompt(q, len(sel), rng), grounding_answer(scene, sel)


def questions(scene, rng):
    """Every askable question: [(type, question, answer)].  Counts are digits."""
    objs, qs = scene["objects"], []
    shapes_present = {o["shape"] for o in objs}
    colours_present = {o["colour"] for o in objs}
    cw = "colour" if rng.random() < 0.75 else "color"
    for s in SHAPES:
        if s in shapes_present or rng.random() < 0.15:
            n = sum(o["shape"] == s for o in objs)
            qs.append(("count_shape", f"How many {PLURAL[s]} are there?", str(n)))
    for c in COLOUR_NAMES:
        if c in colours_present or rng.random() < 0.08:
            n = sum(o["colour"] == c for o in objs)
            qs.append(("count_colour", f"How many {c} objects are there?", str(n)))
    qs.append(("count_all", "How many objects are there?" if rng.random() < 0.7 else "How many shapes are there?",
               str(len(objs))))
    for s, c, k in groups_of(scene):
        if k > 1 or rng.random() < 0.3:
            qs.append(("count_group", f"How many {c} {PLURAL[s]} are there?", str(k)))
    for s in sorted(shapes_present, key=SHAPES.index):
        cols = {o["colour"] for o in objs if o["shape"] == s}
        if len(cols) == 1:
            qs.append(("colour", f"What {cw} is the {s}?", cols.pop()))
    for c in sorted(colours_present, key=COLOUR_NAMES.index):
        shp = {o["shape"] for o in objs if o["colour"] == c}
        if len(shp) == 1:
            qs.append(("shape", f"What shape is the {c} object?", shp.pop()))
    uniq = [o for o in objs if sum(p["shape"] == o["shape"] and p["colour"] == o["colour"] for p in objs) == 1]
    for o in uniq:
        qs.append(("where", f"Where is the {o['colour']} {o['shape']}?", o["position"]))
    for a in uniq:
        for b in uniq:
            if a is not b and abs(a["x"] - b["x"]) >= 0.12 * scene["w"]:
                qs.append(("left_of", f"Is the {a['colour']} {a['shape']} to the left of the "
                           f"{b['colour']} {b['shape']}?", "yes" if a["x"] < b["x"] else "no"))
    if scene["text"]:
        qs.append(("text", "What does the text say?", scene["text"]["word"]))
    if scene["background"] in PLAIN:
        qs.append(("background", f"What {cw} is the background?", scene["background"]))
    return qs


def pick_questions(scene, rng, k):
    """k questions of different kinds: type first (uniform over the available types), then one of it."""
    qs = questions(scene, rng)
    by = {}
    for q in qs:
        by.setdefault(q[0], []).append(q)
    types = sorted(by)
    rng.shuffle(types)
    out = []
    for t in types[:k]:
        out.append(by[t][int(rng.integers(len(by[t])))])
    return out


def eval_questions(scene):
    """The held-out questions of a scene: one count question, one colour/shape question, one other."""
    rng = np.random.default_rng([scene["seed"], 99])
    qs = questions(scene, rng)
    by = {}
    for q in qs:
        by.setdefault(q[0], []).append(q)

    def one(types):
        cand = [q for t in types for q in by.get(t, [])]
        return cand[int(rng.integers(len(cand)))] if cand else None
    out = [one(["count_shape", "count_colour", "count_all", "count_group"])]
    out.append(one(["colour"]) or one(["shape"]))
    out.append(one(["where", "left_of", "text", "background", "shape"]))
    return [q for q in out if q is not None]


def eval_grounding(scene):
    """The evaluation's grounding items: [(type, prompt, truth objects)]: "Locate every object.", and
    `iris detect`'s prompt for one (colour, shape) group of the scene."""
    rng = np.random.default_rng([scene["seed"], 98])
    objs = ordered_objects(scene)
    s, c, _ = groups_of(scene)[int(rng.integers(len(groups_of(scene))))]
    return [("all", GROUND_ALL, objs),
            ("group", detect_prompt(f"{c} {s}"), [o for o in objs if o["shape"] == s and o["colour"] == c])]


def eval_items(scene, image, grounding_items=True):
    """Every evaluation item of a scene, as train_demo.py's evaluations (transformers, iris) use them."""
    items = [dict(image=image, task="caption", prompt=CAPTION_PROMPT, truth=caption(scene))]
    for qt, q, a in eval_questions(scene):
        items.append(dict(image=image, task="vqa", type=qt, prompt=q, truth=a))
    items.append(dict(image=image, task="analysis", prompt=DESCRIBE_PROMPT, truth=analysis(scene)))
    if grounding_items:
        for gt, q, objs in eval_grounding(scene):
            items.append(dict(image=image, task="grounding", type=gt, prompt=q, truth=grounding_answer(scene, objs)))
    return items


def examples(scene, rng, n_questions=2):
    """Training conversations for one scene: [(task, prompt, answer)]."""
    out = [("caption", CAPTION_PROMPT, caption(scene)), ("analysis", DESCRIBE_PROMPT, analysis(scene))]
    out += [("vqa:" + t, q, a) for t, q, a in pick_questions(scene, rng, n_questions)]
    return out

# ---------------------------------------------------------------------------------------------
# scoring


def parse_caption(text):
    """{(shape, colour): count} named by a caption, or None if it does not parse."""
    t = text.strip().rstrip(".")
    if " on a " not in t:
        return None
    body = t.split(" on a ")[0]
    body = body[0].lower() + body[1:] if body else body
    items = body.replace(" and ", ", ").split(", ")
    got = {}
    for it in items:
        ws = it.split()
        if len(ws) == 3 and ws[0] == "an":
            ws[0] = "a"
        if len(ws) != 3 or ws[0] not in NUMBER_WORDS or ws[1] not in COLOURS:
            return None
        shape = ws[2][:-1] if ws[2].endswith("s") and ws[2][:-1] in SHAPES else ws[2]
        if shape not in SHAPES:
            return None
        got[(shape, ws[1])] = got.get((shape, ws[1]), 0) + NUMBER_WORDS.index(ws[0])
    return got


def parse_analysis(text):
    """[(colour, shape, size, position)] listed by an analysis (lines "N. colour shape, size, position")."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        head, _, rest = line.partition(". ")
        if not head.isdigit():
            continue
        f = [x.strip() for x in rest.split(",")]
        cs = f[0].split()
        out.append((cs[0] if cs else "", cs[1] if len(cs) > 1 else "", f[1] if len(f) > 1 else "",
                    f[2] if len(f) > 2 else ""))
    return out


def parse_boxes(text):
    """[(x1, y1, x2, y2, label)] of every {"bbox_2d": [...], "label": "..."} in a grounding answer."""
    out = []
    for m in re.finditer(r'"bbox_2d"\s*:\s*\[([^\]]*)\]\s*(?:,\s*"label"\s*:\s*"([^"]*)")?', text):
        try:
            v = [float(x) for x in m.group(1).split(",")]
        except ValueError:
            continue
        if len(v) == 4:
            out.append((*v, m.group(2) or ""))
    return out


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_boxes(scene, truth_objs, text):
    """Each true object's matched box: one-to-one, greedily by IoU (largest first), boxes in pixels
    (the answer's 0-1000 corners times width / 1000).  [(object, iou, label right)] in object order."""
    w, h = scene["w"], scene["h"]
    pred = [((x1 * w / 1000, y1 * h / 1000, x2 * w / 1000, y2 * h / 1000), lab)
            for x1, y1, x2, y2, lab in parse_boxes(text)]
    truth = [pixel_box(scene, o) for o in truth_objs]
    pairs = sorted(((iou(t, p[0]), i, j) for i, t in enumerate(truth) for j, p in enumerate(pred)), reverse=True)
    got, used = {}, set()
    for v, i, j in pairs:
        if i in got or j in used or v <= 0:
            continue
        got[i] = (v, j)
        used.add(j)
    out = []
    for i, o in enumerate(truth_objs):
        v, j = got.get(i, (0.0, None))
        out.append((o, v, j is not None and pred[j][1] == f"{o['colour']} {o['shape']}"))
    return out, len(pred)


def truth_objects(scene, prompt):
    """The objects a grounding prompt asks for: those of the colour and the shape it names (singular or
    plural), every object when it names neither."""
    words = re.findall(r"[a-z]+", prompt.lower())
    colour = next((w for w in words if w in COLOURS), None)
    shape = next((w[:-1] if w[:-1] in SHAPES else w for w in words if w in SHAPES or w[:-1] in SHAPES), None)
    return [o for o in ordered_objects(scene) if (colour is None or o["colour"] == colour) and
            (shape is None or o["shape"] == shape)]


def score(task, scene, truth, output, prompt=None):
    """Per-output metrics (booleans) for one task; grounding also gives "ious" (one per true object)."""
    out = output.strip()
    m = {"exact": out == truth}
    if task == "caption":
        got = parse_caption(out)
        want = {(s, c): k for s, c, k in groups_of(scene)}
        m["names_all"] = got is not None and set(got) == set(want)       # every object with its colour, no extra
        m["counts"] = got == want
    elif task == "analysis":
        got = parse_analysis(out)
        want = [(o["colour"], o["shape"], o["size"], o["position"]) for o in ordered_objects(scene)]
        m["lists_all"] = sorted(g[:2] for g in got) == sorted(w[:2] for w in want)
        m["full"] = sorted(got) == sorted(want)
    elif task == "grounding":
        matched, n_pred = match_boxes(scene, truth_objects(scene, prompt), out)
        m["all_iou50"] = all(v >= 0.5 for _, v, _ in matched)
        m["count"] = n_pred == len(matched)
        m["ious"] = [round(v, 4) for _, v, _ in matched]
        m["labels"] = [bool(lab) for _, _, lab in matched]
    return m


def summarize(records):
    """records: [{task, metrics}] -> {task: {metric: rate, n}}."""
    agg = {}
    objs = {}
    for r in records:
        a = agg.setdefault(r["task"], {"n": 0})
        a["n"] += 1
        for k, v in r["metrics"].items():
            if isinstance(v, list):             # grounding: per object
                o = objs.setdefault(r["task"], {"ious": [], "labels": []})
                o[k].extend(v)
                continue
            a[k] = a.get(k, 0) + int(bool(v))
    for a in agg.values():
        for k in list(a):
            if k != "n":
                a[k] = round(a[k] / a["n"], 4)
    for t, o in objs.items():                   # objects with a box at IoU >= 0.5, mean IoU, right labels
        n = max(1, len(o["ious"]))
        agg[t].update(objects=len(o["ious"]), object_iou50=round(sum(v >= 0.5 for v in o["ious"]) / n, 4),
                      mean_iou=round(sum(o["ious"]) / n, 4), object_label=round(sum(o["labels"]) / n, 4))
    return agg


def task_key(task, truth_type=None):
    return task if truth_type is None else f"{task}:{truth_type}"

# ---------------------------------------------------------------------------------------------


EXAMPLE_SEEDS = [101, 102, 103, 105, 108, 113]


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "show":
        sc = make_scene(int(sys.argv[2]))
        print(json.dumps(sc))
        for t, p, a in examples(sc, np.random.default_rng(0), 6):
            print(f"[{t}] {p}\n  -> {a}")
        for t, q, a in eval_questions(sc):
            print(f"[eval {t}] {q} -> {a}")
    elif len(sys.argv) >= 4 and sys.argv[1] == "png":
        write_png(sys.argv[3], render(make_scene(int(sys.argv[2]))))
    elif len(sys.argv) >= 4 and sys.argv[1] == "grounding":
        seed, d = int(sys.argv[2]), sys.argv[3]
        sc = make_scene(seed)
        os.makedirs(d, exist_ok=True)
        write_png(os.path.join(d, f"{seed}.png"), render(sc))
        objs = [dict(label=f"{o['colour']} {o['shape']}", box_1000=box_1000(sc, o),
                     box=[round(v, 2) for v in pixel_box(sc, o)]) for o in ordered_objects(sc)]
        with open(os.path.join(d, f"{seed}.json"), "w") as f:
            json.dump(dict(seed=seed, image=f"{seed}.png", width=sc["w"], height=sc["h"], prompt=GROUND_ALL,
                           answer=grounding_answer(sc, ordered_objects(sc)), objects=objs), f, indent=1)
        print(f"{d}/{seed}.png, {d}/{seed}.json: {len(objs)} objects")
    elif len(sys.argv) >= 3 and sys.argv[1] == "examples":
        d = sys.argv[2]
        os.makedirs(d, exist_ok=True)
        for i, seed in enumerate(EXAMPLE_SEEDS):
            sc = make_scene(seed)
            write_png(os.path.join(d, f"scene{i + 1}.png"), render(sc))
            print(f"scene{i + 1}.png: {caption(sc)}")
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
