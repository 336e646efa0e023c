#!/usr/bin/env python3
"""video_ttft.py: time to first token for a video question, iris beside transformers, in one run.

    python3 bench/video_ttft.py MODEL_DIR [--iris build/cuda/bench/bench_video] [--size 1280x720]
                                [--seconds 30] [--src-fps 30] [--skip-hf] [--skip-iris]

MODEL_DIR: what `iris synth --like 2B --dtype fp8 DIR` writes (with the Qwen tokenizer copied in
for iris's prompt builder).  Both sides get the same clip as decoded frames in memory (made by the
same arithmetic as bench/bench_video.c's make_frames; no video decoding is counted on either side)
and sample it the same way: Qwen3VLVideoProcessor, 2 frames a second, Qwen3-VL's
video_preprocessor_config.json sizes (4096 / 25,165,824) with cap_pixels_per_frame=True (iris's
default).  A 30-second 720p clip at 30 fps: 60 frames, 30 temporal patches.

transformers (5.17, bf16 activations, CUDA, no_grad, fixed seeds): the prompt is token ids built by
hand in Qwen3VLProcessor's layout (no tokenizer needed: each "<t seconds>" is 7 placeholder ids, as
Qwen's tokenizer spends 6 to 7 on it), mm_token_type_ids 2 at the video pads;
  ttft_ms: generate(max_new_tokens=1) with pixel_values_videos already on the GPU, median of 5
           after a warm-up;
  ttft_with_preprocess_ms: the same from the uint8 frames through the video processor.
FP8 checkpoints load as transformers loads them; if that fails to load or to run (its FP8 kernels
need the `kernels` package), dequantized to bf16 (FineGrainedFP8Config(dequantize=True));
"hf.dtype_path" says which.
iris: the bench_video binary's JSON (engine submit to first token, median of 5).
Prints one JSON object: {"iris": {...}, "hf": {...}, "speedup_ttft": hf / iris}.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback

IM_START, IM_END, NEWLINE, USER, ASSISTANT = 151644, 151645, 198, 872, 77091
VISION_START, VISION_END, VIDEO_PAD = 151652, 151653, 151656
QUESTION = [74785, 1128, 8573, 304, 419, 2766, 11, 304, 264, 2421, 4244, 13]  # ~ "Describe what happens ..."


def log(*a):
    print("video_ttft:", *a, file=sys.stderr, flush=True)


def make_frames(n, w, h):
    """bench_video.c's make_frames, in numpy (uint8 wrap-around as C's casts)."""
    import numpy as np
    y = np.arange(h, dtype=np.int64)[:, None]
    x = np.arange(w, dtype=np.int64)[None, :]
    out = np.empty((n, h, w, 3), np.uint8)
    for f in range(n):
        out[f, :, :, 0] = (x * 255 // (w - 1) + 3 * f + 0 * y) & 255
        out[f, :, :, 1] = (y * 255 // (h - 1) + 5 * f + 0 * x) & 255
        out[f, :, :, 2] = ((x + 2 * y + 7 * f) // 4) & 255
        sz = h // 6
        y0, x0 = (f * 4) % (h - sz), (f * 7) % (w - sz)
        out[f, y0:y0 + sz, x0:x0 + sz] = 250
    return out


def run_iris(a):
    cmd = [a.iris, a.model, a.size, str(a.seconds), str(a.src_fps), "cuda"]
    log("iris:", " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    sys.stderr.write(p.stderr[-4000:])
    if p.returncode != 0:
        return {"error": "exit %d: %s" % (p.returncode, p.stderr[-800:])}
    return json.loads(p.stdout.strip().splitlines()[-1])


def load_model(a, torch, res):
    from transformers import Qwen3VLForConditionalGeneration as M
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    if cfg.get("quantization_config", {}).get("quant_method") == "fp8":
        try:
            res["dtype_path"] = "fp8"
            return M.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda").eval()
        except Exception as e:  # noqa
            res["fp8_error"] = repr(e)[:400]
            from transformers import FineGrainedFP8Config
            res["dtype_path"] = "fp8 dequantized to bf16"
            return M.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda",
                                     quantization_config=FineGrainedFP8Config(dequantize=True)).eval()
    res["dtype_path"] = "bf16"
    return M.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda").eval()


def prompt_ids(grid, merge=2):
    t, gh, gw = (int(v) for v in grid)
    ids = [IM_START, USER, NEWLINE, VISION_START]
    for k in range(t):
        ids += [27, 15, 13, 18, 6486, 29] + [29]   # "<t seconds>": 7 placeholder ids
        ids += [VISION_START] + [VIDEO_PAD] * (gh * gw // (merge * merge)) + [VISION_END]
    ids += [VISION_END] + QUESTION + [IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE]
    return ids


def run_hf(a, frames, fps):
    import numpy as np
    import torch
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    res = {}
    model = load_model(a, torch, res)
    vp = Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824}, cap_pixels_per_frame=True)
    video = torch.from_numpy(frames).permute(0, 3, 1, 2)
    md = {"total_num_frames": len(frames), "fps": fps, "width": frames.shape[2], "height": frames.shape[1]}

    def preprocess():
        o = vp(videos=[video], video_metadata=[dict(md)], do_sample_frames=True, return_tensors="pt")
        return o["pixel_values_videos"].to("cuda", torch.bfloat16), o["video_grid_thw"].to("cuda")

    pv, grid = preprocess()
    ids = torch.tensor([prompt_ids(grid[0].tolist())], device="cuda")
    mm = (ids == VIDEO_PAD).long() * 2

    def gen(pv, grid):
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=mm,
                              pixel_values_videos=pv, video_grid_thw=grid, max_new_tokens=1, min_new_tokens=1,
                              do_sample=False)

    def timed(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

    try:
        timed(lambda: gen(pv, grid))
    except Exception as e:  # noqa: the FP8 kernels may load but not run (no `kernels` package)
        if res.get("dtype_path") != "fp8":
            raise
        from transformers import FineGrainedFP8Config
        from transformers import Qwen3VLForConditionalGeneration as M
        res["fp8_error"] = repr(e)[:400]
        res["dtype_path"] = "fp8 dequantized to bf16"
        del model
        torch.cuda.empty_cache()
        model = M.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda",
                                  quantization_config=FineGrainedFP8Config(dequantize=True)).eval()
        timed(lambda: gen(pv, grid))
    tt = sorted(timed(lambda: gen(pv, grid)) for _ in range(5))
    tp = sorted(timed(lambda: gen(*preprocess())) for _ in range(5))
    res.update(grid_thw=grid[0].tolist(), prompt_tokens=int(ids.shape[1]), ttft_ms=tt[2], ttft_ms_min=tt[0],
               ttft_with_preprocess_ms=tp[2],
               note="generate(max_new_tokens=1), pixel values on the GPU (ttft_ms) or from the uint8 frames "
                    "through Qwen3VLVideoProcessor (ttft_with_preprocess_ms); median of 5 after a warm-up")
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--iris", default="build/cuda/bench/bench_video")
    p.add_argument("--size", default="1280x720")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--src-fps", type=float, default=30)
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--skip-iris", action="store_true")
    a = p.parse_args()
    w, h = (int(v) for v in a.size.lower().split("x"))
    out = {"clip": {"width": w, "height": h, "seconds": a.seconds, "src_fps": a.src_fps}}
    if not a.skip_iris:
        try:
            out["iris"] = run_iris(a)
        except Exception:  # noqa
            out["iris"] = {"error": traceback.format_exc()[-800:]}
    if not a.skip_hf:
        try:
            n = int(a.seconds * a.src_fps)
            t = time.perf_counter()
            frames = make_frames(n, w, h)
            log("%d frames made in %.1f s" % (n, time.perf_counter() - t))
            out["hf"] = run_hf(a, frames, a.src_fps)
        except Exception:  # noqa
            out["hf"] = {"error": traceback.format_exc()[-800:]}
    i, f = out.get("iris", {}), out.get("hf", {})
    if "ttft_ms" in i and "ttft_ms" in f and i["ttft_ms"] > 0:
        out["speedup_ttft"] = f["ttft_ms"] / i["ttft_ms"]
        if "ttft_with_preprocess_ms" in i and "ttft_with_preprocess_ms" in f:
            out["speedup_ttft_with_preprocess"] = f["ttft_with_preprocess_ms"] / i["ttft_with_preprocess_ms"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
