#!/usr/bin/env python3
"""serve_load.py: the engine's serving figures through `iris serve` (issue "Engine").

Starts `iris serve MODEL` with the given flags, measures the time from the
start to the first 200 of /health, then sends N concurrent streamed caption
requests, each with one WxH picture as a data URL, and reports as one JSON
object: start-up seconds, generated tokens per second over the whole batch,
time to first token p50/p99 (client side: request sent to the first content
delta), and the process's GPU memory as nvidia-smi reports it (sampled every
100 ms during the run; the largest value).  Standard library only, plus PIL
when present for the picture (else a flat-colour PNG written by hand).

  python3 bench/serve_load.py IRIS MODEL [--requests 64] [--image 1024x1024]
          [--max-tokens 32] [--port 8391] -- [iris serve flags...]
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


def picture(w, h, i=0):
    try:
        from PIL import Image, ImageDraw
        im = Image.new("RGB", (w, h), (240 - i % 64, 240, 235))  # i: a different picture per request
        d = ImageDraw.Draw(im)
        d.ellipse((w * 0.1, h * 0.1, w * 0.4, h * 0.4), fill=(200, 30, 30))
        d.rectangle((w * 0.55, h * 0.5, w * 0.9, h * 0.85), fill=(30, 60, 200))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        return "image/jpeg", buf.getvalue()
    except ImportError:
        raw = b"".join(b"\x00" + bytes(v for x in range(w) for v in (x * 255 // w, y * 255 // h, (128 + i) % 256))
                       for y in range(h))

        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
        return "image/png", png


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
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--port", type=int, default=8391)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    serve_flags = argv[cut + 1:]
    w, h = (int(v) for v in a.image.split("x"))
    # a different picture per request, so the prefix cache cannot answer for the vision encoder
    urls = []
    for i in range(a.requests + 1):
        mime, data = picture(w, h, i)
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
    one(0, warm, 0)
    outs = [None] * a.requests
    ts = [threading.Thread(target=one, args=(i, outs, i + 1)) for i in range(a.requests)]
    tb = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - tb
    stop.set()
    th.join()
    ttfts = sorted(o[0] for o in outs if o and o[0] is not None)
    errors = [o[3] for o in outs if o and o[3]]
    gen = sum(o[1] for o in outs if o)

    def pct(p):
        return round(ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] * 1e3, 1) if ttfts else None
    res.update({"requests": a.requests, "image": a.image, "max_tokens": a.max_tokens,
                "single_request": {"ttft_ms": round((warm[0][0] or 0) * 1e3, 1), "total_s": round(warm[0][2], 3),
                                   "error": warm[0][3]},
                "completed": len(ttfts), "errors": errors[:3], "n_errors": len(errors),
                "generated_tokens": gen, "wall_s": round(wall, 3), "gen_tok_per_s": round(gen / wall, 1),
                "ttft_ms_p50": pct(0.5), "ttft_ms_p99": pct(0.99),
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
