#!/usr/bin/env python3
"""ref_loader.py: reference fixtures for the loader tests (safetensors, configs).

Run on the GPU machine (transformers 5.17, torch, safetensors):
    python3 tools/ref_loader.py OUTDIR
It writes, under OUTDIR:
  hf_configs.json        for each case: the files we give transformers (config.json,
                         generation_config.json, preprocessor_config.json) and what
                         transformers resolves them to (defaults, rope forms, tying).
  every_dtype.safetensors  one tensor of every safetensors dtype, written by the
                         `safetensors` package, and every_dtype.json with the values
                         (as float64) and shapes it holds.
  tiny_sharded/          a tiny random Qwen3VLForConditionalGeneration saved by
                         save_pretrained with small shards (index + several files),
                         and tiny_sharded.json listing its tensors (name, dtype, shape).
Nothing here is compared against iris's own output: these are the references.
"""
import json
import os
import sys
import tempfile
import traceback

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "out"
os.makedirs(OUT, exist_ok=True)

import transformers  # noqa: E402
from transformers import AutoConfig, GenerationConfig  # noqa: E402

print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)

ARCH = ["Qwen3VLForConditionalGeneration"]

VISION_2B = {
    "deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1024, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4096,
    "model_type": "qwen3_vl", "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048,
    "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
}


def text_cfg(hidden, inter, heads, layers):
    return {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": inter, "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text", "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000, "tie_word_embeddings": True, "use_cache": True, "vocab_size": 151936,
    }


def full_cfg(text, vision):
    return {
        "architectures": ARCH, "image_token_id": 151655, "model_type": "qwen3_vl", "text_config": text,
        "tie_word_embeddings": True, "transformers_version": "4.57.0.dev0", "video_token_id": 151656,
        "vision_config": vision, "vision_end_token_id": 151653, "vision_start_token_id": 151652,
    }


def tiny_text(**kw):
    t = {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "max_position_embeddings": 4096,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"},
        "rope_theta": 5000000,
    }
    t.update(kw)
    return t


def tiny_vision(**kw):
    v = {
        "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
        "num_position_embeddings": 16, "deepstack_visual_indexes": [0], "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
    }
    v.update(kw)
    return v


def tiny_cfg(top_tie=None, text=None, vision=None):
    c = {"architectures": ARCH, "model_type": "qwen3_vl", "text_config": text or tiny_text(),
         "vision_config": vision or tiny_vision()}
    if top_tie is not None:
        c["tie_word_embeddings"] = top_tie
    return c


cfg_2b = full_cfg(text_cfg(2048, 6144, 16, 28), VISION_2B)
cfg_4b = full_cfg(text_cfg(2560, 9728, 32, 36), dict(VISION_2B, out_hidden_size=2560))
cfg_2b_ropeparams = json.loads(json.dumps(cfg_2b))
t = cfg_2b_ropeparams["text_config"]
del t["rope_scaling"], t["rope_theta"]
t["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                        "mrope_interleaved": True}
cfg_fp8 = json.loads(json.dumps(cfg_2b))
cfg_fp8["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128],
                                  "modules_to_not_convert": ["lm_head", "model.visual.merger.linear_fc1"]}

CONFIG_CASES = [
    ("2b_legacy_rope", cfg_2b),
    ("4b_legacy_rope", cfg_4b),
    ("2b_rope_parameters", cfg_2b_ropeparams),
    ("2b_fp8", cfg_fp8),
    ("minimal_defaults", {"architectures": ARCH, "model_type": "qwen3_vl"}),
    ("text_no_head_dim", tiny_cfg(text={k: v for k, v in tiny_text(hidden_size=96, num_attention_heads=4,
                                                                    rope_scaling={"mrope_interleaved": True, "mrope_section": [6, 5, 5], "rope_type": "default"}).items()
                                        if k != "head_dim"})),
    ("text_no_rope", tiny_cfg(text={k: v for k, v in tiny_text().items() if k not in ("rope_scaling", "rope_theta")})),
    ("tie_top_only_true", tiny_cfg(top_tie=True)),
    ("tie_text_only_true", tiny_cfg(text=tiny_text(tie_word_embeddings=True))),
    ("tie_top_false_text_true", tiny_cfg(top_tie=False, text=tiny_text(tie_word_embeddings=True))),
    ("tie_top_true_text_false", tiny_cfg(top_tie=True, text=tiny_text(tie_word_embeddings=False))),
    ("tie_absent", tiny_cfg()),
    ("vision_defaults", tiny_cfg(vision={})),
]


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    return repr(x)


TEXT_KEYS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "attention_bias",
             "hidden_act", "tie_word_embeddings", "rope_parameters", "rope_scaling", "rope_theta"]
VISION_KEYS = ["depth", "hidden_size", "intermediate_size", "num_heads", "in_channels", "patch_size",
               "temporal_patch_size", "spatial_merge_size", "out_hidden_size", "num_position_embeddings",
               "deepstack_visual_indexes", "hidden_act", "rope_parameters", "rope_theta"]
TOP_KEYS = ["model_type", "architectures", "image_token_id", "video_token_id", "vision_start_token_id",
            "vision_end_token_id", "tie_word_embeddings", "quantization_config"]


def resolve_config(cfg):
    out = {}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        c = AutoConfig.from_pretrained(d)
    out["class"] = type(c).__name__
    out["top"] = {k: jsonable(getattr(c, k, "<absent>")) for k in TOP_KEYS}
    out["text"] = {k: jsonable(getattr(c.text_config, k, "<absent>")) for k in TEXT_KEYS}
    out["vision"] = {k: jsonable(getattr(c.vision_config, k, "<absent>")) for k in VISION_KEYS}
    try:
        out["get_text_config_tie"] = jsonable(c.get_text_config().tie_word_embeddings)
    except Exception as e:  # noqa: BLE001
        out["get_text_config_tie"] = "error: " + repr(e)
    # Whether the model really ties lm_head to embed_tokens (meta device: no memory).
    try:
        from transformers import Qwen3VLForConditionalGeneration
        with torch.device("meta"):
            m = Qwen3VLForConditionalGeneration(c)
        if hasattr(m, "tie_weights"):
            m.tie_weights()
        out["lm_head_tied"] = m.lm_head.weight is m.model.language_model.embed_tokens.weight
    except Exception as e:  # noqa: BLE001
        out["model_error"] = repr(e)
    return out


def vision_theta_probe():
    """The vision rotary theta: build the vision rotary module on CPU and read inv_freq."""
    try:
        from transformers.models.qwen3_vl import modeling_qwen3_vl as mq
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(tiny_cfg(), f)
            c = AutoConfig.from_pretrained(d)
        vm = mq.Qwen3VLVisionModel._from_config(c.vision_config)
        inv = vm.rotary_pos_emb.inv_freq.float()
        dim = inv.numel() * 2
        # inv_freq[i] = theta^(-2i/dim) → theta = inv_freq[1]^(-dim/2)
        theta = float(inv[1].double() ** (-dim / 2.0)) if inv.numel() > 1 else None
        return {"inv_freq": inv.tolist(), "theta": theta}
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e), "trace": traceback.format_exc()}


GEN_CASES = [
    ("qwen_real", {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                   "eos_token_id": [151645, 151643], "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0,
                   "temperature": 0.7, "transformers_version": "4.56.0"}),
    ("eos_int", {"bos_token_id": 151643, "eos_token_id": 151645}),
    ("empty", {}),
]
GEN_KEYS = ["bos_token_id", "pad_token_id", "eos_token_id", "do_sample", "top_k", "top_p", "temperature",
            "repetition_penalty"]


def resolve_gen(g):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(g, f)
        gc = GenerationConfig.from_pretrained(d)
    return {k: jsonable(getattr(gc, k, "<absent>")) for k in GEN_KEYS}


PRE_REAL = {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
            "image_processor_type": "Qwen2VLImageProcessorFast"}
PRE_CASES = [
    ("qwen_real", PRE_REAL),
    ("top_level_pixels", {"min_pixels": 3136, "max_pixels": 1003520, "patch_size": 14, "merge_size": 2,
                          "temporal_patch_size": 2, "image_processor_type": "Qwen2VLImageProcessorFast"}),
    ("both_forms", dict(PRE_REAL, min_pixels=4096, max_pixels=1048576)),
    ("only_type", {"image_processor_type": "Qwen2VLImageProcessorFast"}),
]
PRE_KEYS = ["size", "min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size", "image_mean",
            "image_std"]


def resolve_pre(p):
    from transformers import AutoImageProcessor
    out = {}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(p, f)
        for name, kw in (("fast", {"use_fast": True}), ("slow", {"use_fast": False})):
            try:
                ip = AutoImageProcessor.from_pretrained(d, **kw)
                r = {k: jsonable(getattr(ip, k, "<absent>")) for k in PRE_KEYS}
                r["class"] = type(ip).__name__
            except Exception as e:  # noqa: BLE001
                r = {"error": repr(e)}
            out[name] = r
    return out


def main_configs():
    res = {"transformers": transformers.__version__, "config": [], "generation": [], "preprocessor": []}
    for name, cfg in CONFIG_CASES:
        try:
            r = resolve_config(cfg)
        except Exception as e:  # noqa: BLE001
            r = {"error": repr(e), "trace": traceback.format_exc()}
        print("config", name, json.dumps(r)[:400], flush=True)
        res["config"].append({"name": name, "input": cfg, "hf": r})
    res["vision_theta"] = vision_theta_probe()
    print("vision theta", json.dumps(res["vision_theta"])[:300], flush=True)
    for name, g in GEN_CASES:
        try:
            r = resolve_gen(g)
        except Exception as e:  # noqa: BLE001
            r = {"error": repr(e)}
        print("gen", name, json.dumps(r), flush=True)
        res["generation"].append({"name": name, "input": g, "hf": r})
    for name, p in PRE_CASES:
        try:
            r = resolve_pre(p)
        except Exception as e:  # noqa: BLE001
            r = {"error": repr(e)}
        print("pre", name, json.dumps(r), flush=True)
        res["preprocessor"].append({"name": name, "input": p, "hf": r})
    with open(os.path.join(OUT, "hf_configs.json"), "w") as f:
        json.dump(res, f, indent=1)


def main_every_dtype():
    from safetensors.torch import save_file
    vals = [0.0, 1.0, -2.0, 0.5, 3.0, -0.25]
    ints = [0, 1, -2, 100, -128, 127]
    t = {
        "f64": torch.tensor([1.0 / 3.0, -1e300, 2.5, 0.0, 7.0, -0.125], dtype=torch.float64).reshape(2, 3),
        "f32": torch.tensor([1.0 / 3.0, -1e30, 2.5, 0.0, 7.0, -0.125], dtype=torch.float32).reshape(3, 2),
        "f16": torch.tensor(vals + [65504.0, 6e-5], dtype=torch.float16).reshape(2, 2, 2),
        "bf16": torch.tensor(vals + [1e38, -3.140625], dtype=torch.bfloat16).reshape(8),
        "f8_e4m3": torch.tensor(vals + [448.0, -0.001953125], dtype=torch.float8_e4m3fn).reshape(4, 2),
        "f8_e5m2": torch.tensor(vals + [57344.0, -1.52587890625e-05], dtype=torch.float8_e5m2).reshape(2, 4),
        "i64": torch.tensor([-(2 ** 62), 2 ** 40, -1], dtype=torch.int64),
        "i32": torch.tensor([-(2 ** 31), 2 ** 31 - 1, 5], dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767, 7], dtype=torch.int16),
        "i8": torch.tensor(ints, dtype=torch.int8).reshape(1, 6),
        "u8": torch.tensor([0, 1, 2, 200, 255, 128], dtype=torch.uint8).reshape(6, 1),
        "bool": torch.tensor([True, False, True, True, False], dtype=torch.bool),
        "scalar_f32": torch.tensor(42.5, dtype=torch.float32),
        "empty_bf16": torch.zeros(0, 4, dtype=torch.bfloat16),
    }
    path = os.path.join(OUT, "every_dtype.safetensors")
    save_file(t, path, metadata={"format": "pt", "note": "iris loader fixture"})
    desc = {}
    for k, v in t.items():
        flat = v.reshape(-1)
        if v.dtype == torch.int64:
            values = [int(x) for x in flat.tolist()]
        else:
            values = flat.to(torch.float64).tolist()
        desc[k] = {"dtype": str(v.dtype), "shape": list(v.shape), "values": values}
    with open(os.path.join(OUT, "every_dtype.json"), "w") as f:
        json.dump(desc, f, indent=1)
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    print("every_dtype: file", len(raw), "bytes, header", n, raw[8:8 + n][:200], flush=True)


def main_tiny_sharded():
    from transformers import Qwen3VLForConditionalGeneration
    from safetensors import safe_open
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(tiny_cfg(top_tie=True, text=tiny_text(tie_word_embeddings=True)), f)
        c = AutoConfig.from_pretrained(d)
    torch.manual_seed(0)
    m = Qwen3VLForConditionalGeneration(c).to(torch.bfloat16)
    out = os.path.join(OUT, "tiny_sharded")
    m.save_pretrained(out, max_shard_size="150KB")
    listing = {}
    files = sorted(x for x in os.listdir(out) if x.endswith(".safetensors"))
    for fn in files:
        with safe_open(os.path.join(out, fn), framework="pt") as sf:
            for k in sf.keys():
                sl = sf.get_slice(k)
                listing[k] = {"file": fn, "dtype": sl.get_dtype(), "shape": list(sl.get_shape())}
    with open(os.path.join(OUT, "tiny_sharded.json"), "w") as f:
        json.dump({"files": files, "tensors": listing}, f, indent=1, sort_keys=True)
    print("tiny_sharded:", files, len(listing), "tensors", os.listdir(out), flush=True)


if __name__ == "__main__":
    failures = 0
    for fn in (main_configs, main_every_dtype, main_tiny_sharded):
        try:
            fn()
        except Exception:  # noqa: BLE001
            failures += 1
            traceback.print_exc()
    print("done, failures:", failures, flush=True)
    sys.exit(1 if failures else 0)
