#!/usr/bin/env python3
"""Checks of `iris quantize`, `iris synth` and the sampler against transformers
(run on the GPU machine; transformers 5.17, torch, safetensors).

Input: a directory (argv[1]) made locally by iris:
  tiny-bf16/    iris synth --like tiny --vocab-size 2048 (BF16)
  tiny-q8/      iris quantize tiny-bf16 tiny-q8
  tiny-syn8/    iris synth --like tiny --dtype fp8 --vocab-size 2048
  {2B,4B}{,-fp8}.list, {2B,4B}.config.json   iris synth --list and the config it writes
Made with (G=gpu_in_sampler, an untracked folder that travels to the GPU machine):
  iris synth --like tiny --vocab-size 2048 --seed 3 $G/tiny-bf16
  iris quantize $G/tiny-bf16 $G/tiny-q8
  iris synth --like tiny --dtype fp8 --vocab-size 2048 --seed 4 $G/tiny-syn8
  iris synth --like 2B --list > $G/2B.list   (4B likewise; the configs from a synth run)
Run: python3 tools/check_fp8_sampler.py $G $OUT; copy sampler_hf.{json,bin} to
tests/fixtures/sampler/hf_scores.{json,bin} and report.json to check_report.json.
Output (argv[2]):
  report.json            every check with its numbers
  sampler_hf.json/.bin   raw logits and transformers' processed scores from
                         generate(output_logits, output_scores) for several
                         sampling settings: the fixture of tests/test_sampler.c
"""
import json
import os
import struct
import sys

import torch
from safetensors.torch import load_file

import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

IN, OUT = sys.argv[1], sys.argv[2]
report = {"transformers": transformers.__version__, "torch": torch.__version__}
dev = "cuda" if torch.cuda.is_available() else "cpu"

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_target(name):
    return name.startswith("model.language_model.layers.") and name.endswith(".weight") and \
        name.split(".")[-2] in TARGETS


def hf_quantize(w):
    """transformers' Fp8Quantize.convert (integrations/finegrained_fp8.py) for a 2-D weight,
    called through the class when its signature allows, else its exact torch ops."""
    try:
        from transformers import FineGrainedFP8Config
        from transformers.integrations.finegrained_fp8 import Fp8Quantize

        class Q:
            quantization_config = FineGrainedFP8Config(weight_block_size=(128, 128))

        out = Fp8Quantize(Q()).convert({"x.weight": w})
        return out["x.weight"], out["x.weight_scale_inv"], "Fp8Quantize.convert"
    except Exception as e:  # noqa: BLE001 - fall back to the same math
        how = f"replicated ({type(e).__name__}: {e})"[:200]
    r, c = w.shape
    x = w.to(torch.float32).reshape(r // 128, 128, c // 128, 128)
    amax = x.abs().amax(dim=(-3, -1))
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    s = torch.where(amax > 0, 448.0 / safe, torch.ones_like(safe))
    q = torch.clamp(x * s.unsqueeze(-1).unsqueeze(-3), -448.0, 448.0).to(torch.float8_e4m3fn)
    return q.reshape(r, c), (1.0 / s).to(torch.float32), how


# ---- 1. iris quantize vs transformers' quantizer, bit for bit ----
try:
    import inspect
    from transformers.integrations.finegrained_fp8 import Fp8Quantize as _Q
    src = inspect.getsource(_Q.convert)
    i = src.find("max_abs")
    print("Fp8Quantize.convert excerpt:\n" + src[max(0, i - 200):i + 1400], flush=True)
    print("rtruediv:", inspect.getsource(torch.Tensor.__rtruediv__)[:300], flush=True)
except Exception as e:  # noqa: BLE001
    print("no source:", e, flush=True)
bf = load_file(os.path.join(IN, "tiny-bf16/model.safetensors"))
q8 = load_file(os.path.join(IN, "tiny-q8/model.safetensors"))
n_w = n_bad_q = n_bad_s = 0
how = None
for name, w in bf.items():
    if not is_target(name):
        same = name in q8 and q8[name].dtype == w.dtype and torch.equal(q8[name], w)
        if not same:
            report.setdefault("copied_differs", []).append(name)
        continue
    hq, hs, how = hf_quantize(w)
    n_w += 1
    n_bad_q += int((q8[name].view(torch.uint8) != hq.view(torch.uint8)).sum())
    n_bad_s += int((q8[name + "_scale_inv"] != hs).sum())
report["quantize_vs_transformers"] = {"linears": n_w, "code_mismatches": n_bad_q, "scale_mismatches": n_bad_s,
                                      "how": how, "copied_differs": report.pop("copied_differs", [])}
print("quantize:", report["quantize_vs_transformers"], flush=True)


# ---- 2. transformers loads what iris writes ----
def load(path, fp8):
    kw = {"dtype": torch.bfloat16, "output_loading_info": True}
    if fp8:
        from transformers import FineGrainedFP8Config
        kw["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    m, info = Qwen3VLForConditionalGeneration.from_pretrained(path, **kw)
    info = {k: sorted(list(v))[:20] for k, v in info.items() if v}
    return m, info


for tag, fp8 in (("tiny-bf16", 0), ("tiny-q8", 1), ("tiny-syn8", 1)):
    entry = {}
    try:
        m, info = load(os.path.join(IN, tag), fp8)
        entry["loading_info"] = info
        sd = m.state_dict()
        src = load_file(os.path.join(IN, tag, "model.safetensors"))
        worst = 0.0
        n_cmp = 0
        for name, t in src.items():
            if name.endswith("_scale_inv"):
                continue
            want = t
            if t.dtype == torch.float8_e4m3fn:
                si = src[name + "_scale_inv"]
                r, c = t.shape
                s = si.repeat_interleave(128, 0)[:r].repeat_interleave(128, 1)[:, :c]
                want = (t.to(torch.float32) * s).to(torch.bfloat16)
            if name not in sd:
                entry.setdefault("absent_in_model", []).append(name)
                continue
            d = (sd[name].float().cpu() - want.float()).abs().max().item()
            worst = max(worst, d)
            n_cmp += 1
        entry["tensors_compared"] = n_cmp
        entry["max_abs_diff_vs_file_rule"] = worst
        m = m.float().to(dev).eval()
        ids = torch.tensor([[1, 5, 9, 200, 7, 5, 1000, 3]], device=dev)
        with torch.no_grad():
            lg = m(input_ids=ids).logits
        entry["forward_finite"] = bool(torch.isfinite(lg).all())
        entry["logits_std"] = float(lg.std())
        if tag == "tiny-bf16":
            model_bf16 = m
    except Exception as e:  # noqa: BLE001
        entry["error"] = f"{type(e).__name__}: {e}"[:2000]
    report["load_" + tag] = entry
    print(tag, json.dumps(entry)[:1500], flush=True)


# ---- 3. 2B / 4B names and shapes vs the model transformers builds from our config ----
def meta_shapes(cfg_path):
    cfg = Qwen3VLConfig.from_pretrained(cfg_path) if os.path.isdir(cfg_path) else \
        Qwen3VLConfig.from_dict(json.load(open(cfg_path)))
    with torch.device("meta"):
        m = Qwen3VLForConditionalGeneration(cfg)
    return {k: list(v.shape) for k, v in m.state_dict().items()}


for like in ("2B", "4B"):
    entry = {}
    try:
        hf = meta_shapes(os.path.join(IN, f"{like}.config.json"))
        ours = {}
        for line in open(os.path.join(IN, f"{like}.list")):
            if line.startswith("#"):
                continue
            name, dt, shape = line.split(" ", 2)
            ours[name] = json.loads(shape)
        entry["n_ours"] = len(ours)
        entry["n_hf"] = len(hf)
        entry["only_hf"] = sorted(set(hf) - set(ours))[:20]
        entry["only_ours"] = sorted(set(ours) - set(hf))[:20]
        entry["shape_mismatch"] = [(k, ours[k], hf[k]) for k in sorted(set(ours) & set(hf)) if ours[k] != hf[k]][:20]
        entry["hf_params_excluding_lm_head"] = sum(
            int(torch.Size(v).numel()) for k, v in hf.items() if k != "lm_head.weight")
    except Exception as e:  # noqa: BLE001
        entry["error"] = f"{type(e).__name__}: {e}"[:2000]
    report["shapes_" + like] = entry
    print(like, json.dumps(entry)[:1500], flush=True)


# ---- 4. sampler: raw logits and the processed scores of generate() ----
cases = [
    {"name": "qwen_default", "temperature": 0.7, "top_k": 20, "top_p": 0.8},
    {"name": "top_p_only", "temperature": 1.0, "top_k": 0, "top_p": 0.5},
    {"name": "top_k_hot", "temperature": 1.3, "top_k": 5, "top_p": 1.0},
    {"name": "min_p", "temperature": 0.9, "top_k": 0, "top_p": 1.0, "min_p": 0.3},
    {"name": "repetition", "temperature": 1.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.7},
    {"name": "all", "temperature": 0.5, "top_k": 50, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.3},
    {"name": "cold_top_p", "temperature": 0.3, "top_k": 0, "top_p": 0.95},
    {"name": "wide_top_k", "temperature": 1.0, "top_k": 200, "top_p": 0.99, "repetition_penalty": 0.8},
]
samp = {"vocab": None, "cases": []}
blob = bytearray()
try:
    m = model_bf16
    g = torch.Generator().manual_seed(0)
    V = m.config.text_config.vocab_size
    samp["vocab"] = V
    # Sharpen the random model's flat logits (std 0.23) so the masks bite: an untied lm_head, x8.
    with torch.no_grad():
        m.lm_head.weight = torch.nn.Parameter(m.model.language_model.embed_tokens.weight.detach().clone() * 8.0)
    for ci, c in enumerate(cases):
        prompt = torch.randint(0, V, (1, 10), generator=g)
        prompt[0, 5] = prompt[0, 2]
        kw = dict(do_sample=True, max_new_tokens=1, return_dict_in_generate=True, output_scores=True,
                  output_logits=True, pad_token_id=0, eos_token_id=1, temperature=c["temperature"],
                  top_k=c["top_k"], top_p=c["top_p"], min_p=c.get("min_p"),
                  repetition_penalty=c.get("repetition_penalty", 1.0))
        with torch.no_grad():
            out = m.generate(input_ids=prompt.to(dev), attention_mask=torch.ones_like(prompt).to(dev), **kw)
        raw = out.logits[0][0].float().cpu()
        sc = out.scores[0][0].float().cpu()
        kept = int(torch.isfinite(sc).sum())
        entry = dict(c, prompt=prompt[0].tolist(), offset=len(blob), kept=kept)
        blob += struct.pack(f"<{V}f", *raw.tolist())
        blob += struct.pack(f"<{V}f", *[x if x != float("-inf") else -3.0e38 for x in sc.tolist()])
        samp["cases"].append(entry)
        print("sampler case", c["name"], "kept", kept, flush=True)
except Exception as e:  # noqa: BLE001
    samp["error"] = f"{type(e).__name__}: {e}"[:2000]
    print("sampler error", samp["error"], flush=True)
json.dump(samp, open(os.path.join(OUT, "sampler_hf.json"), "w"), indent=1)
open(os.path.join(OUT, "sampler_hf.bin"), "wb").write(bytes(blob))
json.dump(report, open(os.path.join(OUT, "report.json"), "w"), indent=1)
print("done", flush=True)
