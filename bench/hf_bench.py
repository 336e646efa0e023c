#!/usr/bin/env python3
"""hf_bench.py: the transformers side of `iris bench`, on the same checkpoint, on the GPU machine.

    python3 bench/hf_bench.py MODEL_DIR [--batch 1,8] [--prompt-tokens 1024] [--gen-tokens 32]
                              [--image 1024x1024] [--question-tokens 20] [--skip-image] [--timeout 240]

MODEL_DIR is what `iris synth --like 2B|4B --dtype bf16|fp8 DIR` writes: config.json, model.safetensors,
generation_config.json, preprocessor_config.json (no tokenizer unless synth was given one).  No tokenizer
is needed: prompts are token ids (random ones for the text figures; Qwen's chat layout with the image
placeholders for the image figures), and the image goes through transformers' own image processor.

Prints one JSON object on stdout (logs go to stderr), with the names `iris bench` uses where the figure
is the same (prefill.tok_per_s, decode[].step_ms / tok_per_s, image.vision_ms / ttft_ms).  What is
measured, all in bf16 activations under torch.no_grad, model on cuda, CUDA synchronized around every
timing, after warm-ups, with fixed seeds:
  - prefill: one forward of --prompt-tokens random tokens, KV cache on (use_cache), logits of the last
    row only (logits_to_keep=1), median of 3;
  - decode, per --batch size B: B sequences of --prompt-tokens random tokens; greedy generate() of one
    token (t1) and of --gen-tokens G tokens (tG), min_new_tokens = max_new_tokens so eos never stops
    it; decode tok/s = B*(G-1) / (tG - t1): the steps after the first, without the prefill;
  - image: one WxH picture and a --question-tokens question in Qwen's chat layout: the vision encoder
    alone (model.visual, median of 5), time to first token = generate(max_new_tokens=1) with the
    pixel values already on the GPU (median of 5), and the same from the decoded uint8 image in
    memory through the image processor (preprocess + copy + generate; median of 5); JPEG decoding is
    reported apart and counted in neither;
  - memory: torch.cuda.max_memory_allocated / max_memory_reserved per phase and overall, and
    torch.cuda.mem_get_info: the device's used memory at the end (CUDA context included, like iris's
    device_used_bytes) and its growth from before the model was loaded.

FP8 checkpoints (quantization_config.quant_method "fp8") are run first as transformers loads them
(its fine-grained FP8 integration: FP8 weights, FP8Linear).  If loading or any measurement fails, the
error is kept as "fp8_error" and the figures reported are those of the same weights dequantized to
bf16 (by transformers' FineGrainedFP8Config(dequantize=True), or else by hand, w * scale_inv per
128x128 block); "dtype_path" says which.  Each attempt runs in a child process of its own, with a time
limit, so a hang or a broken CUDA context in one cannot take the fallback with it.
"""
import argparse
import copy
import gc
import json
import os
import signal
import subprocess
import sys
import time
import traceback

T0 = time.perf_counter()

# Qwen's special and common token ids (tokenizer.json of Qwen3-VL); only their positions matter for
# timing, and the vision ones are read from config.json when present.
IM_START, IM_END, NEWLINE, USER, ASSISTANT = 151644, 151645, 198, 872, 77091
VISION_START, VISION_END, IMAGE_PAD = 151652, 151653, 151655
FIRST_SPECIAL = 151643          # random prompt tokens are drawn below this id (no special tokens)


def log(*a):
    print("hf_bench [%6.1fs]" % (time.perf_counter() - T0), *a, file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description="transformers' figures beside `iris bench`, as one JSON object.")
    p.add_argument("model", help="model directory (iris synth output or a Hugging Face layout)")
    p.add_argument("--batch", default="1,8", help="decode batch sizes, comma-separated (default 1,8)")
    p.add_argument("--prompt-tokens", type=int, default=1024, help="prompt length for prefill and decode")
    p.add_argument("--gen-tokens", type=int, default=32, help="new tokens per decode run (>= 2)")
    p.add_argument("--image", default="1024x1024", help="WxH of the test picture (default 1024x1024)")
    p.add_argument("--question-tokens", type=int, default=20, help="question length after the image")
    p.add_argument("--skip-image", action="store_true", help="no image figures")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds each attempt may take")
    p.add_argument("--worker", choices=["bf16", "fp8", "dequant"], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    try:
        a.batches = [int(x) for x in a.batch.split(",") if x.strip()]
    except ValueError:
        p.error("--batch wants sizes like 1,8 (got %r)" % a.batch)
    if not a.batches or any(b < 1 or b > 4096 for b in a.batches):
        p.error("--batch: each size in 1..4096 (got %r)" % a.batch)
    if a.prompt_tokens < 1 or a.prompt_tokens > (1 << 20):
        p.error("--prompt-tokens wants 1..1048576")
    if a.gen_tokens < 2 or a.gen_tokens > 65536:
        p.error("--gen-tokens wants 2..65536 (decode speed is measured on the tokens after the first)")
    if a.question_tokens < 1 or a.question_tokens > 4096:
        p.error("--question-tokens wants 1..4096")
    try:
        w, h = (int(x) for x in a.image.lower().split("x"))
        if w < 32 or h < 32 or w * h > (1 << 26):
            raise ValueError
        a.image_wh = (w, h)
    except ValueError:
        p.error("--image wants WxH, each side >= 32 (got %r)" % a.image)
    return a


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def fp8_config(cfg):
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config")
    return q if isinstance(q, dict) and q.get("quant_method") == "fp8" else None


def short_error(e):
    """The exception and the last frames of its traceback, for the JSON."""
    frames = traceback.extract_tb(e.__traceback__)[-2:]
    where = "; ".join("%s:%d %s" % (os.path.basename(f.filename), f.lineno, f.name) for f in frames)
    return ("%s: %s" % (type(e).__name__, e))[:800] + (" (at %s)" % where if where else "")


# ---------------------------------------------------------------------------------------------------
# the parent: one child per attempt, the fallback for FP8, one JSON object out

def run_attempt(a, path):
    cmd = [sys.executable, os.path.abspath(__file__), a.model, "--worker", path, "--batch", a.batch,
           "--prompt-tokens", str(a.prompt_tokens), "--gen-tokens", str(a.gen_tokens), "--image", a.image,
           "--question-tokens", str(a.question_tokens), "--timeout", str(a.timeout)]
    if a.skip_image:
        cmd.append("--skip-image")
    log("attempt %s: %s" % (path, " ".join(cmd)))
    t = time.perf_counter()
    rec = {"path": path}
    # A session of its own, so that a timeout ends the worker and anything it started (compilers).
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=a.timeout)
        rec["rc"] = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = p.communicate()
        rec["rc"] = None
        rec["error"] = "timed out after %.0f s (--timeout)" % a.timeout
    out = (out or b"").decode("utf-8", "replace")
    rec["seconds"] = round(time.perf_counter() - t, 1)
    res = None
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                res = json.loads(line)
                break
            except ValueError:
                pass
    if res is None and "error" not in rec:
        rec["error"] = "the worker printed no result (exit status %s; its log is above on stderr)" % rec["rc"]
    if res is not None and res.get("error"):
        rec["error"] = res["error"]
    elif res is not None and res.get("errors"):
        rec["error"] = "; ".join("%s: %s" % kv for kv in res["errors"].items())
    return res, rec


def main(argv):
    a = parse_args(argv)
    if a.worker:
        return worker(a)
    out = {"engine": "transformers", "model": os.path.abspath(a.model)}
    try:
        cfg = read_config(a.model)
    except (OSError, ValueError) as e:
        out["error"] = "%s/config.json: %s" % (a.model, e)
        print(json.dumps(out, indent=1))
        return 2
    q = fp8_config(cfg)
    out["checkpoint_dtype"] = "fp8" if q else "bf16"
    attempts = ["fp8", "dequant"] if q else ["bf16"]
    result, fp8_error, fp8_partial, recs = None, None, None, []
    for path in attempts:
        res, rec = run_attempt(a, path)
        recs.append(rec)
        if path == "fp8" and rec.get("error"):
            fp8_error = rec["error"]
            log("FP8 as transformers loads it failed; falling back to bf16 weights:", fp8_error)
            if res is not None and (res.get("decode") or res.get("prefill")):
                fp8_partial = res
            continue
        result = res
        break
    if result is not None:
        out.update(result)
    else:
        out["error"] = recs[-1].get("error", "no result")
    out["checkpoint_dtype"] = "fp8" if q else "bf16"
    out["fp8_error"] = fp8_error
    # the identifying keys first, the figures next, the explanations and attempts last
    first = ["engine", "model", "gpu", "transformers", "torch", "cuda", "python", "checkpoint_dtype", "dtype_path",
             "fp8_error", "error", "errors", "layers", "hidden", "fp8_params", "weights_bytes", "attn_implementation",
             "load_s", "prompt_tokens", "gen_tokens", "prefill", "decode", "decode_how", "image", "memory"]
    out = dict([(k, out[k]) for k in first if k in out] + [(k, v) for k, v in out.items() if k not in first])
    if fp8_partial is not None:
        out["fp8_partial"] = fp8_partial
    out["attempts"] = recs
    out["total_s"] = round(time.perf_counter() - T0, 1)
    print(json.dumps(out, indent=1), flush=True)
    return 0 if result is not None and not result.get("error") and not result.get("errors") else 1


# ---------------------------------------------------------------------------------------------------
# the worker: one load path, every measurement, one JSON line on the real stdout

class Bench:
    def __init__(self, a, torch, res):
        self.a, self.torch, self.res = a, torch, res
        self.cfg = read_config(a.model)
        t = self.cfg.get("text_config") or self.cfg
        self.vocab = int(t.get("vocab_size", 151936))
        self.token_hi = min(self.vocab, FIRST_SPECIAL)
        self.gen = torch.Generator().manual_seed(0)
        self.dropped = set()      # keyword arguments this transformers refused (see call())
        self.model = None

    # -- helpers

    def sync_time(self, fn):
        torch = self.torch
        torch.cuda.synchronize()
        t = time.perf_counter()
        r = fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t, r

    def call(self, fn, kw):
        """fn(**kw), dropping mm_token_type_ids / logits_to_keep if this transformers refuses them."""
        kw = {k: v for k, v in kw.items() if k not in self.dropped}
        while True:
            try:
                return fn(**kw)
            except (TypeError, ValueError) as e:
                bad = [k for k in ("mm_token_type_ids", "logits_to_keep") if k in kw and k in str(e)]
                if not bad:
                    raise
                log("dropping %s: %s" % (bad, str(e)[:200]))
                for k in bad:
                    self.dropped.add(k)
                    kw.pop(k)

    def rand_ids(self, b, n):
        return self.torch.randint(0, self.token_hi, (b, n), generator=self.gen).to("cuda")

    def text_inputs(self, ids):
        torch = self.torch
        return dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                    mm_token_type_ids=torch.zeros_like(ids))

    def gen_config(self, n):
        gcfg = copy.deepcopy(self.model.generation_config)
        gcfg.do_sample, gcfg.num_beams = False, 1
        gcfg.temperature, gcfg.top_p, gcfg.top_k = None, None, None
        gcfg.max_new_tokens, gcfg.min_new_tokens = n, n     # eos cannot end it early
        if gcfg.pad_token_id is None:
            gcfg.pad_token_id = FIRST_SPECIAL
        return gcfg

    def generate(self, inputs, n):
        out = self.call(self.model.generate, dict(inputs, generation_config=self.gen_config(n)))
        seq = out if isinstance(out, self.torch.Tensor) else out.sequences
        got = seq.shape[1] - inputs["input_ids"].shape[1]
        if got != n:
            raise RuntimeError("generate made %d new tokens, not %d" % (got, n))
        return seq

    def median(self, xs):
        s = sorted(xs)
        return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])

    def phase(self, name, fn):
        torch, res = self.torch, self.res
        log("== " + name)
        torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded, and the other phases still run
            traceback.print_exc()
            res.setdefault("errors", {})[name] = short_error(e)
        mem = res["memory"]
        mem["phase_peak_allocated_bytes"][name] = torch.cuda.max_memory_allocated()
        mem["phase_peak_reserved_bytes"][name] = torch.cuda.max_memory_reserved()
        res["phase_s"][name] = round(time.perf_counter() - t, 2)

    # -- loading

    def count_fp8(self):
        f8 = getattr(self.torch, "float8_e4m3fn", None)
        return sum(1 for p in self.model.parameters() if p.dtype == f8)

    def from_pretrained(self, **kw):
        from transformers import Qwen3VLForConditionalGeneration as M
        try:
            return M.from_pretrained(self.a.model, dtype=self.torch.bfloat16, device_map="cuda", **kw)
        except Exception as e:  # noqa: BLE001
            log("from_pretrained(device_map='cuda') failed (%s); loading on the CPU, then .to('cuda')" % e)
            self.res["device_map_error"] = short_error(e)
            gc.collect()
            self.torch.cuda.empty_cache()
            return M.from_pretrained(self.a.model, dtype=self.torch.bfloat16, **kw).to("cuda")

    def smoke(self):
        """A short forward and a 2-token generate: a path that cannot run fails here, before timing."""
        ids = self.rand_ids(1, 64)
        out = self.call(self.model, dict(self.text_inputs(ids), use_cache=False))
        finite = bool(self.torch.isfinite(out.logits.float()).all().item())
        self.generate(self.text_inputs(ids), 2)
        return finite

    def manual_dequant(self):
        """bf16(w_fp8 * scale_inv per block) for every FP8 linear, into a model built without quantization."""
        torch = self.torch
        from safetensors import safe_open
        from transformers import AutoConfig, Qwen3VLForConditionalGeneration as M
        bo, bi = (fp8_config(self.cfg) or {}).get("weight_block_size") or [128, 128]
        conf = AutoConfig.from_pretrained(self.a.model)
        for c in (conf, getattr(conf, "text_config", None)):
            if c is not None and getattr(c, "quantization_config", None) is not None:
                try:
                    delattr(c, "quantization_config")
                except AttributeError:
                    c.quantization_config = None
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = M(conf)
        finally:
            torch.set_default_dtype(old)
        raw = {}
        for fn in sorted(os.listdir(self.a.model)):
            if fn.endswith(".safetensors"):
                with safe_open(os.path.join(self.a.model, fn), framework="pt", device="cuda") as f:
                    for k in f.keys():
                        raw[k] = f.get_tensor(k)
        sd, n = {}, 0
        for k, t in raw.items():
            if k.endswith("_scale_inv"):
                continue
            s = raw.get(k + "_scale_inv")
            if s is not None:
                o, i = t.shape
                s = s.float().repeat_interleave(bo, 0)[:o].repeat_interleave(bi, 1)[:, :i]
                t = (t.float() * s).to(torch.bfloat16)
                n += 1
            elif t.is_floating_point():
                t = t.to(torch.bfloat16)
            sd[k] = t
        del raw
        missing, unexpected = model.load_state_dict(sd, strict=False)
        del sd
        missing = [m for m in missing if m != "lm_head.weight"]
        if missing or unexpected:
            raise RuntimeError("manual load: missing %s, unexpected %s" % (missing[:5], list(unexpected)[:5]))
        lm, emb = model.get_output_embeddings(), model.get_input_embeddings()
        if self.cfg.get("tie_word_embeddings", True) and lm is not None and lm.weight is not emb.weight:
            lm.weight = emb.weight
        log("manual dequantization: %d FP8 linears -> bf16" % n)
        return model.eval()

    def load(self):
        torch, res, path = self.torch, self.res, self.a.worker
        if path in ("bf16", "fp8"):
            self.model = self.from_pretrained().eval()
            n8 = self.count_fp8()
            if path == "bf16":
                res["dtype_path"] = "bf16"
            elif n8:
                kinds = sorted({type(m).__name__ for m in self.model.modules()
                                if getattr(getattr(m, "weight", None), "dtype", None) == torch.float8_e4m3fn})
                res["dtype_path"] = "fp8 (transformers fine-grained FP8: %s)" % ", ".join(kinds)
            else:
                res["dtype_path"] = "bf16 (transformers dequantized the FP8 checkpoint while loading it)"
            res["fp8_params"] = n8
            res["logits_finite"] = self.smoke()
            return
        # dequant: transformers' own dequantization first, then by hand
        try:
            from transformers import FineGrainedFP8Config
            self.model = self.from_pretrained(quantization_config=FineGrainedFP8Config(dequantize=True)).eval()
            if self.count_fp8():
                raise RuntimeError("FineGrainedFP8Config(dequantize=True) left %d FP8 parameters" % self.count_fp8())
            res["logits_finite"] = self.smoke()
            res["dtype_path"] = "bf16 (FP8 checkpoint dequantized by transformers, FineGrainedFP8Config(dequantize=True))"
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res["dequant_transformers_error"] = short_error(e)
            self.model = None
            gc.collect()
            torch.cuda.empty_cache()
            self.model = self.manual_dequant()
            res["logits_finite"] = self.smoke()
            res["dtype_path"] = "bf16 (FP8 checkpoint dequantized by hand: bf16(w_fp8 * scale_inv per 128x128 block))"
        res["fp8_params"] = self.count_fp8()

    # -- the measurements

    def prefill(self):
        P, reps = self.a.prompt_tokens, 3
        inputs = dict(self.text_inputs(self.rand_ids(1, P)), use_cache=True, logits_to_keep=1)
        self.sync_time(lambda: self.call(self.model, inputs))
        ts = [self.sync_time(lambda: self.call(self.model, inputs))[0] for _ in range(reps)]
        ms = self.median(ts) * 1e3
        self.res["prefill"] = {
            "tokens": P, "ms": round(ms, 2), "ms_min": round(min(ts) * 1e3, 2), "tok_per_s": round(P / ms * 1e3),
            "how": "model(input_ids) of %d random tokens, use_cache=True, logits of the last row%s; median of %d "
                   "after 1 warm-up" % (P, "" if "logits_to_keep" not in self.dropped else " (logits of every row: "
                                        "this transformers refused logits_to_keep)", reps)}

    def decode(self):
        P, G = self.a.prompt_tokens, self.a.gen_tokens
        out = self.res["decode"]
        for B in self.a.batches:
            try:
                inputs = self.text_inputs(self.rand_ids(B, P))
                self.sync_time(lambda: self.generate(inputs, 2))                      # warm-up: this B's shapes
                t1 = self.median([self.sync_time(lambda: self.generate(inputs, 1))[0] for _ in range(2)])
                tg = self.sync_time(lambda: self.generate(inputs, G))[0]
                step = (tg - t1) / (G - 1)
                if step <= 0:
                    raise RuntimeError("generate(%d) took %.1f ms, not more than generate(1) %.1f ms"
                                       % (G, tg * 1e3, t1 * 1e3))
                e = {"batch": B, "step_ms": round(step * 1e3, 3), "tok_per_s": round(B / step, 1),
                     "generate_1_ms": round(t1 * 1e3, 2), "generate_%d_ms" % G: round(tg * 1e3, 2),
                     "end_to_end_tok_per_s": round(B * G / tg, 1)}
                log("decode batch %d: %.2f ms/step, %.1f tok/s" % (B, step * 1e3, B / step))
            except Exception as ex:  # noqa: BLE001 - the other batch sizes still run
                traceback.print_exc()
                e = {"batch": B, "error": short_error(ex)}
                self.res.setdefault("errors", {})["decode_batch_%d" % B] = e["error"]
                self.torch.cuda.empty_cache()
            out.append(e)
        self.res["decode_how"] = (
            "per batch B: B sequences of %d random tokens (no padding); greedy generate() (DynamicCache, no "
            "CUDA graphs, no torch.compile) with min_new_tokens=max_new_tokens; t1 = generate of 1 token "
            "(median of 2), tG = generate of %d tokens (1 run), after a 2-token warm-up; step_ms = "
            "(tG - t1)/(%d - 1), tok_per_s = B / step: decode without the prefill; end_to_end_tok_per_s = "
            "B*%d/tG" % (P, G, G, G))

    def image(self):
        torch, a, res = self.torch, self.a, self.res
        import numpy as np
        W, H = a.image_wh
        info = {"size": "%dx%d" % (W, H)}
        res["image"] = info
        # A picture with structure (gradients, a disc, noise); its values do not change the timings.
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:H, 0:W].astype(np.float32)
        img = np.stack([255 * x / (W - 1), 255 * y / (H - 1), 128 + 100 * np.sin((x + 2 * y) / 37.0)], -1)
        img[(y - 0.4 * H) ** 2 + (x - 0.6 * W) ** 2 < (0.25 * min(W, H)) ** 2] = [230, 40, 60]
        img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
        chw = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))    # decoded uint8 [3,H,W]

        self.jpeg_decode(img, info)
        ip, image_arg = self.image_processor(chw, img, info)
        merge = int((self.cfg.get("vision_config") or {}).get("spatial_merge_size", 2))
        if ip is not None:
            pre_ts = []
            for _ in range(6):
                t, o = self.sync_time(lambda: ip(images=[image_arg], return_tensors="pt"))
                pre_ts.append(t)
            info["preprocess_ms"] = round(self.median(pre_ts[1:]) * 1e3, 2)
            pv_cpu, grid_cpu = o["pixel_values"], o["image_grid_thw"]
        else:
            pv_cpu, grid_cpu = self.synthetic_pixels(W, H)
        g = [int(v) for v in grid_cpu.reshape(-1, 3)[0].tolist()]
        n_img = g[0] * g[1] * g[2] // (merge * merge)
        info["grid_thw"] = g
        info["image_tokens"] = n_img
        ids = self.image_prompt(n_img)
        info["prompt_tokens"] = int(ids.shape[1])
        info["question_tokens"] = a.question_tokens
        pv = pv_cpu.to("cuda", torch.bfloat16)
        grid = grid_cpu.to("cuda")

        def inputs(pv, grid):
            return dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                        mm_token_type_ids=(ids == self.image_pad).long(), pixel_values=pv, image_grid_thw=grid)

        def vision():
            inner = getattr(self.model, "model", None)
            visual = getattr(inner, "visual", None) or getattr(self.model, "visual", None)
            try:
                fn = (lambda: visual(pv, grid_thw=grid))
                fn()
            except TypeError:       # another signature: the model's own entry point to the tower
                fn = (lambda: inner.get_image_features(pixel_values=pv, image_grid_thw=grid))
                fn()
            ts = [self.sync_time(fn)[0] for _ in range(5)]
            info["vision_ms"] = round(self.median(ts) * 1e3, 2)

        def ttft():
            ts = [self.sync_time(lambda: self.generate(inputs(pv, grid), 1))[0] for _ in range(6)]
            info["ttft_ms"] = round(self.median(ts[1:]) * 1e3, 2)
            info["ttft_ms_min"] = round(min(ts[1:]) * 1e3, 2)

        def ttft_with_preprocess():
            def full():
                o = ip(images=[image_arg], return_tensors="pt")
                return self.generate(inputs(o["pixel_values"].to("cuda", torch.bfloat16),
                                            o["image_grid_thw"].to("cuda")), 1)
            ts = [self.sync_time(full)[0] for _ in range(6)]
            info["ttft_with_preprocess_ms"] = round(self.median(ts[1:]) * 1e3, 2)

        for name, fn in (("vision", vision), ("ttft", ttft), ("ttft_with_preprocess", ttft_with_preprocess)):
            if name == "ttft_with_preprocess" and ip is None:
                continue
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - recorded; the other image figures still run
                traceback.print_exc()
                res.setdefault("errors", {})["image." + name] = short_error(e)
        log("image %dx%d: %d tokens, vision %s ms, ttft %s ms, with preprocessing %s ms" % (
            W, H, ids.shape[1], info.get("vision_ms"), info.get("ttft_ms"), info.get("ttft_with_preprocess_ms")))
        info["how"] = (
            "Qwen chat layout as token ids (<|im_start|>user, <|vision_start|>, %d image pads, <|vision_end|>, "
            "%d random question tokens, <|im_end|>, <|im_start|>assistant); vision_ms: model.visual(pixel_values, "
            "grid_thw) alone; ttft_ms: generate(max_new_tokens=1) with pixel values already on the GPU (vision "
            "encoder + prefill + first token); ttft_with_preprocess_ms: the same from the decoded uint8 image in "
            "memory through the image processor (preprocess + copy to the GPU + generate); preprocess_ms: the "
            "processor alone; jpeg_decode_ms: decoding a JPEG of the picture, counted in none of them; each a "
            "median of 5 after 1 warm-up" % (n_img, a.question_tokens))

    def jpeg_decode(self, img, info):
        try:
            import io
            from PIL import Image
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            data = buf.getvalue()
            try:
                from torchvision.io import decode_jpeg
                t = self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8)
                dec, how = (lambda: decode_jpeg(t)), "torchvision.io.decode_jpeg"
            except Exception:  # noqa: BLE001
                dec, how = (lambda: Image.open(io.BytesIO(data)).convert("RGB").load()), "PIL"
            ts = [self.sync_time(dec)[0] for _ in range(6)]
            info["jpeg_decode_ms"] = round(self.median(ts[1:]) * 1e3, 2)
            info["jpeg_decoder"] = how
            info["jpeg_bytes"] = len(data)
        except Exception as e:  # noqa: BLE001 - an aside; the image figures do not need it
            info["jpeg_decode_error"] = short_error(e)

    def image_processor(self, chw, img, info):
        """transformers' image processor from preprocessor_config.json, and the image form it accepts."""
        ip = None
        try:
            from transformers import AutoImageProcessor
            ip = AutoImageProcessor.from_pretrained(self.a.model)
        except Exception as e:  # noqa: BLE001
            info["auto_image_processor_error"] = short_error(e)
            try:
                from transformers import Qwen2VLImageProcessor
                with open(os.path.join(self.a.model, "preprocessor_config.json")) as f:
                    pc = json.load(f)
                keep = ("size", "patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")
                ip = Qwen2VLImageProcessor(**{k: pc[k] for k in keep if k in pc})
            except Exception as e2:  # noqa: BLE001
                info["image_processor_error"] = short_error(e2)
                return None, None
        info["image_processor"] = type(ip).__name__
        for arg, form in ((chw, "uint8 tensor [3,H,W]"), (None, "PIL image")):
            try:
                if arg is None:
                    from PIL import Image
                    arg = Image.fromarray(img)
                o = ip(images=[arg], return_tensors="pt")
                o["pixel_values"], o["image_grid_thw"]
                info["image_processor_input"] = form
                return ip, arg
            except Exception as e:  # noqa: BLE001
                info["image_processor_error_" + form.split()[0]] = short_error(e)
        return None, None

    def synthetic_pixels(self, W, H):
        """Pixel values of the right shape when no image processor runs (labelled in the JSON)."""
        torch = self.torch
        vc = self.cfg.get("vision_config") or {}
        ps, tp, m = int(vc.get("patch_size", 16)), int(vc.get("temporal_patch_size", 2)), int(vc.get("spatial_merge_size", 2))
        f = ps * m
        h, w = max(f, round(H / f) * f), max(f, round(W / f) * f)
        gh, gw = h // ps, w // ps
        self.res["image"]["pixel_values_source"] = "synthetic N(0,1) of the processor's shape (no processor ran)"
        return (torch.randn(gh * gw, 3 * tp * ps * ps, generator=self.gen),
                torch.tensor([[1, gh, gw]], dtype=torch.long))

    def image_prompt(self, n_img):
        torch, c = self.torch, self.cfg
        self.image_pad = int(c.get("image_token_id", IMAGE_PAD))
        vs, ve = int(c.get("vision_start_token_id", VISION_START)), int(c.get("vision_end_token_id", VISION_END))
        q = torch.randint(0, self.token_hi, (self.a.question_tokens,), generator=self.gen).tolist()
        ids = ([IM_START, USER, NEWLINE, vs] + [self.image_pad] * n_img + [ve] + q +
               [IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE])
        return torch.tensor([ids], dtype=torch.long, device="cuda")

    def run(self):
        torch, res = self.torch, self.res
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        torch.zeros(1, device="cuda")                      # the CUDA context, before the first reading
        free0, total = torch.cuda.mem_get_info()
        res["memory"]["device_total_bytes"] = total
        res["memory"]["device_used_before_load_bytes"] = total - free0
        torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        try:
            self.load()
        except Exception as e:  # noqa: BLE001 - the parent falls back (FP8) or reports it
            traceback.print_exc()
            res["error"] = "load: " + short_error(e)
            return 3
        res["load_s"] = round(time.perf_counter() - t, 2)
        res["memory"]["load_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        res["memory"]["load_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        gc.collect()
        torch.cuda.empty_cache()                           # what loading needed transiently is not the model's
        res["weights_bytes"] = sum(p.numel() * p.element_size() for p in self.model.parameters())
        res["memory"]["allocated_after_load_bytes"] = torch.cuda.memory_allocated()
        res["attn_implementation"] = getattr(self.model.config, "_attn_implementation", None)
        log("loaded in %.1f s: %s, %.2f GB of parameters, attention %s" % (
            res["load_s"], res["dtype_path"], res["weights_bytes"] / 1e9, res["attn_implementation"]))

        self.phase("prefill", self.prefill)
        self.phase("decode", self.decode)
        if not self.a.skip_image:
            self.phase("image", self.image)

        mem = res["memory"]
        free1, _ = torch.cuda.mem_get_info()
        mem["peak_allocated_bytes"] = max([mem["load_peak_allocated_bytes"]] +
                                          list(mem["phase_peak_allocated_bytes"].values()))
        mem["peak_reserved_bytes"] = max([mem["load_peak_reserved_bytes"]] +
                                         list(mem["phase_peak_reserved_bytes"].values()))
        mem["device_used_bytes"] = total - free1
        mem["device_used_growth_bytes"] = free0 - free1
        mem["how"] = ("peak_*: torch.cuda.max_memory_allocated/reserved (tensors / PyTorch's caching pool) over "
                      "the run, per phase in phase_*; device_used_bytes: total - free from torch.cuda.mem_get_info "
                      "at the end (the whole device, CUDA context included, as iris's device_used_bytes); "
                      "device_used_growth_bytes: its growth from before loading (after the CUDA context); the "
                      "pool is emptied once, after loading, never during the measurements")
        return 0


def worker(a):
    # Everything anyone prints goes to stderr; the result line goes to the real stdout, for the parent.
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                 ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)
    res = {"engine": "transformers", "model": os.path.abspath(a.model), "worker_path": a.worker,
           "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens, "decode": [], "phase_s": {},
           "memory": {"phase_peak_allocated_bytes": {}, "phase_peak_reserved_bytes": {}}}
    rc = 3
    try:
        import torch
        import transformers
        res.update({"transformers": transformers.__version__, "torch": torch.__version__,
                    "cuda": torch.version.cuda, "python": sys.version.split()[0]})
        try:
            transformers.utils.logging.disable_progress_bar()
        except Exception:  # noqa: BLE001
            pass
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        res["gpu"] = torch.cuda.get_device_name(0)
        cfg = read_config(a.model)
        t = cfg.get("text_config") or cfg
        res["layers"], res["hidden"] = t.get("num_hidden_layers"), t.get("hidden_size")
        log("%s, torch %s, transformers %s, path %s" % (res["gpu"], torch.__version__, transformers.__version__,
                                                        a.worker))
        with torch.no_grad():
            rc = Bench(a, torch, res).run()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        res["error"] = short_error(e)
        rc = 3
    res["worker_s"] = round(time.perf_counter() - T0, 1)
    os.write(real_stdout, (json.dumps(res) + "\n").encode())
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
