#!/usr/bin/env python3
"""serve_load.py: the engine's serving figures through `iris serve` (issues "Engine", 27).

Starts `iris serve MODEL` with the given flags, measures the time from the
start to the first 200 of /health, sends one request alone (warm-up, and the
unloaded latency), then N streamed caption requests from C concurrent
clients (each client sends its next request when its answer is complete;
C = N by default: all at once), each with its own WxH picture as a data URL,
and reports as one JSON object: start-up seconds, images/s and generated
tokens/s over the whole batch, latency p50/p99 (request sent to the last
byte of the answer) and time to first token p50/p99 (to the first content
delta), client side, and the process's GPU memory as nvidia-smi reports it
(sampled every 100 ms during the run; the largest value; 0 without
nvidia-smi).

The pictures are those of `iris bench --images` (cmd_bench_images.c):
gradients and a checkerboard with red and green offset by the picture's
index, so every request's picture differs (up to 65,536) and neither the
prefix cache nor the image keys can spare the vision encoder.  PNG by the
standard library (the default), or JPEG (--format jpeg) by PIL or
torchvision where one is installed.  Standard library only otherwise.

  python3 bench/serve_load.py IRIS MODEL [--requests 64] [--concurrency C] [--image 1024x1024]
          [--max-tokens 32] [--format png|jpeg] [--port 8391] -- [iris serve flags...]

With --write DIR it starts no server: it writes the N pictures as files DIR/00000.png ... (or
.jpg), for the same work through the command line's batch mode, e.g.
  iris ask DIR -m MODEL 'Write a one-sentence caption for this image.' --temperature 0 \
      --max-tokens 64 --ignore-eos --max-num-seqs 64 -o /dev/null   (its last line: images/s)
"""
import argparse
import base64
import io
import json
import os
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib


def picture_rgb(w, h, i):
    """Picture i as raw RGB rows, as cmd_bench_images.c's picture() makes it."""
    dr, dg = i & 255, (i >> 8) & 255
    red = bytes((255 * x // (w - 1 if w > 1 else 1) + dr) & 255 for x in range(w))
    blue = [bytes(200 if ((x // 32 + k) & 1) else 40 for x in range(w)) for k in (0, 1)]
    rows = []
    for y in range(h):
        row = bytearray(3 * w)
        row[0::3] = red
        row[1::3] = bytes([(255 * y // (h - 1 if h > 1 else 1) + dg) & 255]) * w
        row[2::3] = blue[(y // 32) & 1]
        rows.append(bytes(row))
    return rows


def png_of(w, h, rows):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + r for r in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


def jpeg_of(w, h, rows):
    data = b"".join(rows)
    try:
        from PIL import Image
        buf = io.BytesIO()
        Image.frombytes("RGB", (w, h), data).save(buf, "JPEG", quality=90)
        return buf.getvalue()
    except ImportError:
        pass
    try:
        import torch
        from torchvision.io import encode_jpeg
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(h, w, 3).permute(2, 0, 1).contiguous()
        return bytes(encode_jpeg(t, quality=90).numpy().tobytes())
    except ImportError:
        raise SystemExit("--format jpeg needs PIL or torchvision; use --format png")


def picture(w, h, i, fmt="png"):
    rows = picture_rgb(w, h, i)
    return ("image/jpeg", jpeg_of(w, h, rows)) if fmt == "jpeg" else ("image/png", png_of(w, h, rows))


def gpu_mem_of(pid):
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout
    except Exception:
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1]) * 1024 * 1024
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iris")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--image", default="1024x1024")
    ap.add_argument("--concurrency", type=int, default=0, help="clients at once (default: --requests)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--format", choices=("png", "jpeg"), default="png")
    ap.add_argument("--port", type=int, default=8391)
    ap.add_argument("--write", metavar="DIR", help="write the pictures to DIR and exit (no server)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    serve_flags = argv[cut + 1:]
    w, h = (int(v) for v in a.image.split("x"))
    conc = a.concurrency if a.concurrency > 0 else a.requests
    if a.write:
        os.makedirs(a.write, exist_ok=True)
        for i in range(a.requests):
            mime, data = picture(w, h, i, a.format)
            with open(os.path.join(a.write, "%05d.%s" % (i, "jpg" if mime == "image/jpeg" else "png")), "wb") as f:
                f.write(data)
        print(json.dumps({"written": a.requests, "dir": a.write, "image": a.image, "format": a.format}))
        return
    # a different picture per request, so the prefix cache cannot answer for the vision encoder;
    # the warm-up's is picture N, as in iris bench --images
    urls = []
    for i in list(range(a.requests)) + [a.requests]:
        mime, data = picture(w, h, i, a.format)
        urls.append("data:%s;base64,%s" % (mime, base64.b64encode(data).decode()))
    base = "http://127.0.0.1:%d" % a.port

    t0 = time.time()
    log = open(os.environ.get("SERVE_LOG", "/tmp/iris-serve-load.log"), "w")
    proc = subprocess.Popen([a.iris, "serve", a.model, "--port", str(a.port)] + serve_flags, stdout=log,
                            stderr=subprocess.STDOUT)
    startup = None
    while time.time() - t0 < 120 and proc.poll() is None:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    startup = time.time() - t0
                    break
        except Exception:
            pass
        time.sleep(0.02)
    res = {"model": a.model, "serve_flags": serve_flags, "startup_s": startup}
    if startup is None:
        res["error"] = "the server did not become ready (exit %s); see %s" % (proc.poll(), log.name)
        proc.kill()
        print(json.dumps(res))
        return 1

    peak = [gpu_mem_of(proc.pid) or 0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            m = gpu_mem_of(proc.pid)
            if m:
                peak[0] = max(peak[0], m)
            time.sleep(0.1)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()

    def one(i, out, k):
        body = json.dumps({"model": a.model, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True,
                           "stream": True, "stream_options": {"include_usage": True},
                           "messages": [{"role": "user", "content": [
                               {"type": "image_url", "image_url": {"url": urls[k]}},
                               {"type": "text", "text": "Write a one-sentence caption for this image."}]}]}).encode()
        req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        t = time.time()
        first, toks, err = None, 0, None
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                for line in r:
                    line = line.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    ev = json.loads(line[6:])
                    if ev.get("choices") and ev["choices"][0].get("delta", {}).get("content") and first is None:
                        first = time.time() - t
                    if ev.get("usage"):
                        toks = ev["usage"].get("completion_tokens", 0)
        except Exception as e:  # noqa: BLE001 - reported
            err = str(e)
        out[i] = (first, toks, time.time() - t, err)

    # one request alone first (warm-up, and the unloaded latency)
    warm = [None]
    one(0, warm, a.requests)
    outs = [None] * a.requests
    next_i = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= a.requests:
                return
            one(i, outs, i)
    ts = [threading.Thread(target=client) for _ in range(conc)]
    tb = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - tb
    stop.set()
    th.join()
    ttfts = sorted(o[0] for o in outs if o and o[0] is not None)
    lats = sorted(o[2] for o in outs if o and not o[3])
    errors = [o[3] for o in outs if o and o[3]]
    gen = sum(o[1] for o in outs if o)

    def pct(v, p):
        return round(v[min(len(v) - 1, int(p * len(v)))] * 1e3, 1) if v else None
    res.update({"requests": a.requests, "concurrency": conc, "image": a.image, "format": a.format,
                "max_tokens": a.max_tokens,
                "single_request": {"ttft_ms": round((warm[0][0] or 0) * 1e3, 1), "total_s": round(warm[0][2], 3),
                                   "error": warm[0][3]},
                "completed": len(lats), "errors": errors[:3], "n_errors": len(errors),
                "generated_tokens": gen, "wall_s": round(wall, 3), "images_per_s": round(len(lats) / wall, 2),
                "gen_tok_per_s": round(gen / wall, 1), "latency_ms_p50": pct(lats, 0.5),
                "latency_ms_p99": pct(lats, 0.99), "ttft_ms_p50": pct(ttfts, 0.5), "ttft_ms_p99": pct(ttfts, 0.99),
                "gpu_memory_peak_bytes": peak[0], "gpu_memory_how": "nvidia-smi --query-compute-apps used_memory of "
                "the server process, sampled every 100 ms from ready to the end of the batch"})
    proc.terminate()
    try:
        proc.wait(timeout=30)
        res["exit_code"] = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        res["exit_code"] = "killed"
    print(json.dumps(res))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
