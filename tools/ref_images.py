#!/usr/bin/env python3
"""ref_images.py: image-preprocessing parity fixtures for iris (tests/fixtures/images/).

Run on the GPU machine (transformers 5.17, torchvision, Pillow, numpy):

    python3 tools/ref_images.py OUTDIR            # make the images + refs.json, tar them
    python3 tools/ref_images.py OUTDIR --make-only  # only the images (local check of the generator)

1. Makes test images deterministically (numpy content, Pillow encoders, and a small hand-written
   PNG writer for every colour type / bit depth / tRNS / Adam7 that Pillow cannot save).
2. Decodes each with torchvision.io.decode_image(path, mode=ImageReadMode.RGB) (the loader of
   transformers 5.17's default torchvision backend, QWEN3VL.md §4.1) and runs
   Qwen2VLImageProcessor (the Qwen3-VL preprocessor config, §11) on the uint8 [3,H,W] tensor.
3. Records per image: decoded uint8 HWC sha256, the tvF.resize (bicubic, antialias) result's
   sha256, grid_thw, pixel_values shape / sha256 of the float32 bytes / sum / sum of squares
   (float64), and a few sampled rows stored as uint8 codes x with value == (x - 127.5) / 127.5
   (checked exactly here).
4. Writes OUTDIR/refs.json and OUTDIR/images_ref.tar.gz (images/ + refs.json).
"""
import base64
import hashlib
import io
import json
import math
import os
import struct
import sys
import tarfile
import time
import zlib

import numpy as np
from PIL import Image

MIN_PIXELS, MAX_PIXELS = 65536, 16777216


# ---------------------------------------------------------------- content

def texture(h, w, seed, noise=True, zoom=1.0):
    """uint8 [h, w, 3]: gradients, stripes of several frequencies, a checker, discs, mild noise.
    zoom > 1 stretches the pattern (large images stay a few hundred KB as JPEG)."""
    rng = np.random.default_rng(seed)
    y = np.arange(h, dtype=np.float64)[:, None] / zoom
    x = np.arange(w, dtype=np.float64)[None, :] / zoom
    u = x / max(w - 1, 1)
    v = y / max(h - 1, 1)
    img = np.zeros((h, w, 3), np.float64)
    img[..., 0] = 255 * u + 0 * v
    img[..., 1] = 255 * v
    img[..., 2] = 128 + 100 * np.sin(2 * math.pi * (x / 37.0 + y / 53.0))
    # stripes with a frequency that rises across the image (aliasing-sensitive)
    img[..., 0] += 60 * np.sin(2 * math.pi * x * (0.02 + 0.3 * u))
    # checker with hard edges
    cs = max(2, min(h, w) / zoom // 12)
    chk = ((x // cs + y // cs) % 2) * 90 - 45
    img[..., 1] += chk
    # a few discs with hard edges
    for _ in range(6):
        cy, cx = rng.uniform(0, h / zoom), rng.uniform(0, w / zoom)
        r = rng.uniform(0.05, 0.3) * min(h, w) / zoom + 1
        col = rng.uniform(-120, 120, 3)
        m = ((y - cy) ** 2 + (x - cx) ** 2) < r * r
        img[m] += col
    if noise:
        img += rng.normal(0, 6, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def smooth_texture(h, w, seed):
    """Large images: edges and texture that JPEG compresses well (no per-pixel noise)."""
    return texture(h, w, seed, noise=False, zoom=max(1.0, min(h, w) / 300.0))


# ---------------------------------------------------------------- a raw PNG writer

def png_chunk(tag, data):
    c = struct.pack(">I", len(data)) + tag + data
    return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def pack_rows(samples, bit_depth):
    """samples: uint array [h, w*channels] -> list of packed row bytes."""
    rows = []
    for r in samples:
        if bit_depth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif bit_depth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:
            per = 8 // bit_depth
            n = len(r)
            pad = (-n) % per
            rr = np.concatenate([r.astype(np.uint8), np.zeros(pad, np.uint8)]).reshape(-1, per)
            b = np.zeros(rr.shape[0], np.uint8)
            for k in range(per):
                b |= (rr[:, k] << (8 - bit_depth * (k + 1))).astype(np.uint8)
            rows.append(b.tobytes())
    return rows


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, samples, color_type, bit_depth, plte=None, trns=None, interlace=False):
    """samples: [h, w, channels] unsigned ints already in the file's sample range."""
    h, w, ch = samples.shape
    raw = b""
    if not interlace:
        for i, row in enumerate(pack_rows(samples.reshape(h, w * ch), bit_depth)):
            raw += bytes([i % 5 if bit_depth >= 8 else 0]) + apply_filter(row, i % 5, bit_depth, ch)
    else:
        for (x0, y0, dx, dy) in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] == 0 or sub.shape[1] == 0:
                continue
            for row in pack_rows(sub.reshape(sub.shape[0], -1), bit_depth):
                raw += b"\x00" + row
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
    if plte is not None:
        data += png_chunk(b"PLTE", bytes(np.asarray(plte, np.uint8).reshape(-1)))
    if trns is not None:
        data += png_chunk(b"tRNS", trns)
    data += png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def apply_filter(row, ftype, bit_depth, ch):
    """PNG filters 0..4 against a zero previous row (keeps the writer simple but exercises
    every filter type in the decoder)."""
    bpp = max(1, ch * bit_depth // 8)
    cur = np.frombuffer(row, np.uint8).astype(np.int32)
    prev = np.zeros_like(cur)
    out = np.zeros_like(cur)
    for i in range(len(cur)):
        a = cur[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if ftype == 0:
            p = 0
        elif ftype == 1:
            p = a
        elif ftype == 2:
            p = b
        elif ftype == 3:
            p = (a + b) // 2
        else:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            p = a if (pa <= pb and pa <= pc) else (b if pb <= pc else c)
        out[i] = (cur[i] - p) & 0xFF
    return out.astype(np.uint8).tobytes()


# ---------------------------------------------------------------- the image set

def make_images(d):
    """Returns a list of dicts {name, file, kind}; writes the files into d/images/."""
    os.makedirs(os.path.join(d, "images"), exist_ok=True)
    out = []

    def p(name):
        return os.path.join(d, "images", name)

    def pil_save(name, arr_or_img, fmt, **kw):
        im = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
        im.save(p(name), fmt, **kw)
        out.append({"name": name, "file": "images/" + name})

    # JPEG: baseline 4:2:0 / 4:4:4 / 4:2:2, progressive, grayscale, CMYK, odd sizes, extremes.
    pil_save("jpg_baseline_640x480.jpg", texture(480, 640, 1), "JPEG", quality=90)
    pil_save("jpg_444_517x333.jpg", texture(333, 517, 2), "JPEG", quality=95, subsampling=0)
    pil_save("jpg_422_333x517.jpg", texture(517, 333, 3), "JPEG", quality=85, subsampling=1)
    pil_save("jpg_progressive_800x600.jpg", texture(600, 800, 4), "JPEG", quality=88, progressive=True)
    pil_save("jpg_progressive_1080x1920.jpg", smooth_texture(1920, 1080, 5), "JPEG", quality=80,
             progressive=True)
    pil_save("jpg_gray_500x375.jpg", Image.fromarray(texture(375, 500, 6)).convert("L"), "JPEG", quality=90)
    pil_save("jpg_cmyk_300x200.jpg", Image.fromarray(texture(200, 300, 7)).convert("CMYK"), "JPEG",
             quality=92)
    pil_save("jpg_1920x1080.jpg", smooth_texture(1080, 1920, 8), "JPEG", quality=85)
    pil_save("jpg_6000x4000.jpg", smooth_texture(4000, 6000, 9), "JPEG", quality=50)
    pil_save("jpg_1x1.jpg", texture(1, 1, 10), "JPEG", quality=90)
    pil_save("jpg_10x1900.jpg", texture(1900, 10, 11), "JPEG", quality=90)
    pil_save("jpg_144x800.jpg", texture(144, 800, 12), "JPEG", quality=90)
    pil_save("jpg_restart_401x299.jpg", texture(299, 401, 13), "JPEG", quality=90, restart_marker_rows=2)

    # PNG via Pillow: RGB, RGBA, L, 1-bit, P.
    pil_save("png_rgb_224x224.png", texture(224, 224, 20), "PNG")
    rgba = np.dstack([texture(200, 300, 21), (np.arange(300)[None, :] * np.ones((200, 1)) % 256).astype(np.uint8)])
    pil_save("png_rgba_300x200.png", rgba, "PNG")
    pil_save("png_gray_800x144.png", Image.fromarray(texture(144, 800, 22)).convert("L"), "PNG")
    pil_save("png_mono1_61x97.png", Image.fromarray(texture(97, 61, 23)).convert("1"), "PNG")
    pil_save("png_palette_250x180.png", Image.fromarray(texture(180, 250, 24)).convert("P", palette=Image.ADAPTIVE, colors=200), "PNG")
    pil_save("png_100x100.png", texture(100, 100, 25), "PNG")
    pil_save("png_1x1.png", texture(1, 1, 26), "PNG")
    pil_save("png_2000x10.png", texture(10, 2000, 27), "PNG")     # aspect exactly 200: allowed
    pil_save("png_10x2001.png", texture(2001, 10, 28), "PNG")     # aspect 200.1: refused
    pil_save("png_4096x40.png", texture(40, 4096, 29), "PNG")

    # PNG via the raw writer: every colour type and bit depth, tRNS, Adam7.
    def raw(name, samples, ct, bd, **kw):
        write_png(p(name), samples, ct, bd, **kw)
        out.append({"name": name, "file": "images/" + name})

    rng = np.random.default_rng(30)
    t = texture(90, 120, 31)
    g8 = t[..., 1]
    raw("png_gray2_120x90.png", (g8 >> 6)[..., None], 0, 2)
    raw("png_gray4_120x90.png", (g8 >> 4)[..., None], 0, 4)
    g16 = (g8.astype(np.uint32) * 257 + rng.integers(0, 256, g8.shape)).astype(np.uint16)
    raw("png_gray16_120x90.png", g16[..., None], 0, 16)
    raw("png_graytrns_120x90.png", g8[..., None], 0, 8, trns=struct.pack(">H", int(g8[0, 0])))
    rgb16 = (t.astype(np.uint32) * 257 + rng.integers(0, 256, t.shape)).astype(np.uint16)
    raw("png_rgb16_120x90.png", rgb16, 2, 16)
    raw("png_rgbtrns_120x90.png", t, 2, 8, trns=struct.pack(">HHH", *[int(v) for v in t[0, 0]]))
    ga = np.dstack([g8, 255 - g8])
    raw("png_ga8_120x90.png", ga, 4, 8)
    raw("png_ga16_120x90.png", np.dstack([g16, 65535 - g16]), 4, 16)
    raw("png_rgba16_120x90.png", np.dstack([rgb16, rgb16[..., :1]]), 6, 16)
    plte16 = rng.integers(0, 256, (16, 3))
    idx4 = (g8 >> 4)
    raw("png_pal4_trns_120x90.png", idx4[..., None], 3, 4, plte=plte16,
        trns=bytes(rng.integers(0, 256, 10).astype(np.uint8)))
    plte4 = rng.integers(0, 256, (4, 3))
    raw("png_pal2_120x90.png", (g8 >> 6)[..., None], 3, 2, plte=plte4)
    raw("png_pal1_120x90.png", (g8 >> 7)[..., None], 3, 1, plte=plte4[:2])
    raw("png_adam7_rgb_121x91.png", texture(91, 121, 32), 2, 8, interlace=True)
    raw("png_adam7_gray1_33x17.png", (texture(17, 33, 33)[..., 0] >> 7)[..., None], 0, 1, interlace=True)

    # WebP: lossy, lossless, with and without alpha.
    pil_save("webp_lossy_400x300.webp", texture(300, 400, 40), "WEBP", quality=80)
    pil_save("webp_lossless_256x320.webp", texture(320, 256, 41), "WEBP", lossless=True)
    rgba2 = np.dstack([texture(300, 300, 42), texture(300, 300, 43)[..., 0]])
    pil_save("webp_lossy_alpha_300x300.webp", rgba2, "WEBP", quality=75)
    pil_save("webp_lossless_alpha_150x100.webp", np.dstack([texture(100, 150, 44), texture(100, 150, 45)[..., 2]]),
             "WEBP", lossless=True)

    # EXIF orientation 1..8 (JPEG) and 6 (PNG eXIf): decode with and without applying it.
    base = texture(32, 48, 50)
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        pil_save("exif_o%d.jpg" % o, base, "JPEG", quality=95, exif=ex.tobytes())
        out[-1]["exif"] = o
    ex = Image.Exif()
    ex[0x0112] = 6
    pil_save("exif_o6.png", base, "PNG", exif=ex.tobytes())
    out[-1]["exif"] = 6
    return out


# ---------------------------------------------------------------- references

def py_smart_resize(h, w, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    """QWEN3VL.md §4.2 (only used if transformers does not export smart_resize)."""
    if max(h, w) / min(h, w) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def sha(b):
    return hashlib.sha256(b).hexdigest()


def row_indices(n):
    r = np.random.default_rng(n)
    idx = {0, n - 1, n // 2}
    for v in r.integers(0, n, 5):
        idx.add(int(v))
    return sorted(idx)


def summarize(pv):
    """pv: float32 numpy [N, D]."""
    n = pv.shape[0]
    rows = []
    idx = row_indices(n)
    for i in idx:
        row = pv[i]
        codes = np.rint(row.astype(np.float64) * 127.5 + 127.5)
        assert codes.min() >= 0 and codes.max() <= 255
        codes = codes.astype(np.uint8)
        back = (codes.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)
        assert np.array_equal(back, row), "pixel value not of the form (x-127.5)/127.5"
        rows.append(base64.b64encode(codes.tobytes()).decode())
    pv64 = pv.astype(np.float64)
    return {"shape": list(pv.shape), "sha256": sha(np.ascontiguousarray(pv, "<f4").tobytes()),
            "sum": float(pv64.sum()), "sumsq": float((pv64 * pv64).sum()),
            "row_idx": idx, "rows_b64": rows}


def main():
    outdir = sys.argv[1]
    make_only = "--make-only" in sys.argv
    entries = make_images(outdir)
    total = sum(os.path.getsize(os.path.join(outdir, e["file"])) for e in entries)
    print("made %d images, %.2f MB" % (len(entries), total / 1e6))
    for e in entries:
        print("  %-36s %8d bytes" % (e["name"], os.path.getsize(os.path.join(outdir, e["file"]))))
    if make_only:
        return

    import torch
    import torchvision
    import transformers
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as tvF
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    except ImportError:
        try:
            from transformers.vision_utils import smart_resize  # noqa
        except ImportError:
            smart_resize = py_smart_resize

    def make_proc(min_px=MIN_PIXELS, max_px=MAX_PIXELS):
        return Qwen2VLImageProcessor(size={"longest_edge": max_px, "shortest_edge": min_px}, patch_size=16,
                                     temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                     image_std=[0.5] * 3)

    proc = make_proc()
    print("transformers", transformers.__version__, "torch", torch.__version__, "torchvision",
          torchvision.__version__, "processor", type(proc).__name__, getattr(proc, "backend", None))

    def decode(path, exif=False):
        img = decode_image(read_file(path), mode=ImageReadMode.RGB, apply_exif_orientation=exif)
        info = {"dtype": str(img.dtype).replace("torch.", "")}
        if img.dtype == torch.uint16:
            u8 = tvF.to_dtype(img, torch.uint8, scale=True)
            info["u16_to_u8_is_shift8"] = bool(torch.equal(u8, (img.to(torch.int32) >> 8).to(torch.uint8)))
            info["u16_raw_sha256"] = sha(img.permute(1, 2, 0).to(torch.int32).contiguous().numpy()
                                         .astype("<u2").tobytes())
            img16, img = img, u8
        else:
            img16 = None
        hwc = img.permute(1, 2, 0).contiguous().numpy()
        info.update({"h": int(img.shape[1]), "w": int(img.shape[2]), "sha256": sha(hwc.tobytes())})
        return img, img16, info

    def run_proc(p, imgs):
        o = p(images=imgs, return_tensors="pt")
        return o["pixel_values"].float().numpy(), o["image_grid_thw"].tolist()

    refs = {"versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "torchvision": torchvision.__version__,
                         "pillow": Image.__version__ if hasattr(Image, "__version__") else ""},
            "images": [], "multi": [], "custom": []}
    decoded = {}
    for e in entries:
        path = os.path.join(outdir, e["file"])
        r = {"name": e["name"], "file": e["file"]}
        try:
            img, img16, info = decode(path)
        except Exception as ex:  # noqa
            r["decode_error"] = str(ex)[:300]
            refs["images"].append(r)
            print(e["name"], "decode error", ex)
            continue
        r["decoded"] = info
        decoded[e["name"]] = img
        if "exif" in e:
            r["exif"] = e["exif"]
            _, _, info2 = decode(path, exif=True)
            r["decoded_exif"] = info2
        if img16 is not None:
            try:
                pv16, g16 = run_proc(proc, [img16])
                r["hf_on_raw_uint16"] = {"grid_thw": g16, "sum": float(pv16.astype(np.float64).sum()),
                                         "max": float(pv16.max())}
            except Exception as ex:  # noqa
                r["hf_on_raw_uint16"] = {"error": str(ex)[:300]}
        h, w = info["h"], info["w"]
        try:
            rh, rw = smart_resize(h, w, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
            r["smart_resize"] = [int(rh), int(rw)]
            res = tvF.resize(img[None], [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True)[0]
            r["resized_sha256"] = sha(res.permute(1, 2, 0).contiguous().numpy().tobytes())
        except Exception as ex:  # noqa
            r["smart_resize_error"] = str(ex)[:300]
        try:
            pv, grid = run_proc(proc, [img])
            r["grid_thw"] = grid[0]
            r.update(summarize(pv))
        except Exception as ex:  # noqa
            r["error"] = str(ex)[:300]
        refs["images"].append(r)
        print("%-36s %s grid=%s %s" % (e["name"], info["sha256"][:12], r.get("grid_thw"), r.get("error", "")))

    # Several images in one call: concatenated along N in order.
    for names in [["jpg_baseline_640x480.jpg", "png_rgba_300x200.png", "webp_lossy_400x300.webp"],
                  ["png_1x1.png", "jpg_progressive_800x600.jpg"]]:
        try:
            pv, grid = run_proc(proc, [decoded[n] for n in names])
            m = {"names": names, "grid_thw": grid}
            m.update(summarize(pv))
            refs["multi"].append(m)
            print("multi", names, grid)
        except Exception as ex:  # noqa
            print("multi failed", names, ex)

    # Non-default min/max pixels.
    for name, mn, mx in [("jpg_1920x1080.jpg", 4096, 200000), ("png_100x100.png", 300000, 16777216),
                         ("jpg_6000x4000.jpg", 65536, 1048576), ("jpg_baseline_640x480.jpg", 1024 * 32, 1024 * 96)]:
        try:
            pv, grid = run_proc(make_proc(mn, mx), [decoded[name]])
            c = {"name": name, "min_pixels": mn, "max_pixels": mx, "grid_thw": grid[0]}
            c.update(summarize(pv))
            refs["custom"].append(c)
            print("custom", name, mn, mx, grid)
        except Exception as ex:  # noqa
            print("custom failed", name, ex)

    try:
        # Reference timing: 12 MP JPEG, decode + processor (for the report, not a fixture).
        big = os.path.join(outdir, "bench_4000x3000.jpg")
        Image.fromarray(smooth_texture(3000, 4000, 99)).save(big, "JPEG", quality=90)
        data = read_file(big)
        timing = {}
        for nt in [1, torch.get_num_threads()]:
            torch.set_num_threads(nt)
            best_dec, best_all = 1e9, 1e9
            for _ in range(3):
                t0 = time.perf_counter()
                img = decode_image(data, mode=ImageReadMode.RGB)
                t1 = time.perf_counter()
                run_proc(proc, [img])
                t2 = time.perf_counter()
                best_dec, best_all = min(best_dec, t1 - t0), min(best_all, t2 - t0)
            timing["threads_%d" % nt] = {"decode_ms": best_dec * 1e3, "decode_and_process_ms": best_all * 1e3}
        refs["timing_12mp"] = timing
        os.remove(big)
        print("timing", timing)
    except Exception as ex:  # noqa
        print("timing failed", ex)
    refs["smart_resize_fn"] = getattr(smart_resize, "__module__", "?")

    with open(os.path.join(outdir, "refs.json"), "w") as f:
        json.dump(refs, f, indent=1)
    with tarfile.open(os.path.join(outdir, "images_ref.tar.gz"), "w:gz") as tf:
        tf.add(os.path.join(outdir, "images"), arcname="images")
        tf.add(os.path.join(outdir, "refs.json"), arcname="refs.json")
    print("wrote", os.path.join(outdir, "images_ref.tar.gz"))


if __name__ == "__main__":
    main()
