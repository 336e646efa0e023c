#!/usr/bin/env python3
"""make_tiny_models.py: tiny random Qwen3-VL checkpoints and transformers' reference outputs.

Two stages:
  python3 tools/make_tiny_models.py images     (here, numpy only) writes the small test
      images to tests/fixtures/tiny/images/ and the tokenizer to tests/fixtures/tiny/tokenizer/.
  python3 tools/make_tiny_models.py models OUT (on the GPU machine: torch, transformers 5.17)
      builds every model with transformers, saves it (safetensors + tokenizer + preprocessor +
      generation config + chat template), and records transformers' outputs for four
      conversations into OUT/<model>/ plus the shared inputs into OUT/inputs/<scenario>/.

References follow QWEN3VL.md §11: each model is built in bf16 and saved; the fp32 reference is the
saved checkpoint loaded in float32 (the same bf16 values), run on the CPU with eager attention, so
no TF32 or reduced-precision reduction is involved.  The FP8 model is Qwen's block format written
here from a bf16 model and loaded back with FineGrainedFP8Config(dequantize=True).

Layout of hidden states (hidden.npy, [L+1, T, H] float32): row i < L is the input of decoder layer
i (so row i >= 1 already holds layer i-1's DeepStack addition), row L is the output of the last
layer before the final norm.  Everything is deterministic (fixed seeds, fixed corpus).
"""
import copy
import json
import os
import re
import struct
import sys
import traceback
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "tiny")
IMG_DIR = os.path.join(FIX, "images")
TOK_DIR = os.path.join(FIX, "tokenizer")
TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat", "qwen3vl_instruct_chat_template.jinja")

VOCAB = 512
N_BPE = 480                     # 256 byte tokens + 224 merges; special tokens from 480 on
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
            "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
            "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
SPECIAL_IDS = {s: N_BPE + i for i, s in enumerate(SPECIALS)}   # same order as Qwen's 151643..151668
NON_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
               "<think>", "</think>"}
ENDOFTEXT, IM_END = SPECIAL_IDS["<|endoftext|>"], SPECIAL_IDS["<|im_end|>"]
IMAGE_PAD = SPECIAL_IDS["<|image_pad|>"]

MIN_PIXELS, MAX_PIXELS = 1024, 65536
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------------------------
# images (numpy + zlib: no PIL needed)

IMAGES = {"a.png": (96, 128), "b.png": (37, 50), "c.png": (70, 45)}   # name: (height, width)


def png_write(path, rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].astype(np.uint8).tobytes() for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def make_images():
    os.makedirs(IMG_DIR, exist_ok=True)
    rng = np.random.default_rng(1234)
    for k, (name, (h, w)) in enumerate(sorted(IMAGES.items())):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        img = np.zeros((h, w, 3))
        img[..., 0] = 255 * x / max(w - 1, 1)
        img[..., 1] = 255 * y / max(h - 1, 1)
        img[..., 2] = 128 + 100 * np.sin((x + 2 * y) / (3.0 + k))
        cy, cx, r = h * 0.4, w * 0.6, min(h, w) * 0.25           # a disc and a bar, so patches differ
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = [230, 40, 60 + 40 * k]
        img[int(h * 0.7):int(h * 0.8), int(w * 0.1):int(w * 0.5)] = [20, 20, 200]
        img += rng.normal(0, 12, img.shape)
        png_write(os.path.join(IMG_DIR, name), np.clip(np.rint(img), 0, 255).astype(np.uint8))

# ---------------------------------------------------------------------------------------------
# tokenizer: byte-level BPE of Qwen's kind, trained deterministically on a fixed corpus


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


CORPUS = """Hello, who are you? I am a small test model. What is in this image? You are a helpful assistant.
Compare the two pictures. Describe it. A red square on a blue background. What colour is it? It is red.
The quick brown fox jumps over the lazy dog. There are two circles and one square in the picture.
user assistant system image picture the a an and is are in on of to what where which how many
Describe the scene: objects, setting, activities and visible text. Answer the question briefly.
This is a picture of a cat sitting on a table. The sky is blue and the grass is green.
Numbers 0 1 2 3 4 5 6 7 8 9 10 42 100. Code: def f(x): return x + 1
"""


def train_bpe(corpus=None, n_bpe=None):
    """BPE merges on `corpus` (default CORPUS) until `n_bpe` tokens (default N_BPE) or no pair is left."""
    corpus, n_bpe = corpus or CORPUS, n_bpe or N_BPE
    pairs = bytes_to_unicode()
    enc = dict(pairs)
    vocab = {}
    for _, ch in pairs:
        vocab[ch] = len(vocab)
    # A rough pre-tokenization (Python's re has no \p{L}); the merges only need to be valid.
    words = {}
    for wd in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", corpus):
        sym = tuple(enc[b] for b in wd.encode("utf-8"))
        words[sym] = words.get(sym, 0) + 1
    merges = []
    while len(vocab) < n_bpe:
        counts = {}
        for sym, c in words.items():
            for i in range(len(sym) - 1):
                counts[(sym[i], sym[i + 1])] = counts.get((sym[i], sym[i + 1]), 0) + c
        if not counts:
            break
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(list(best))
        new = best[0] + best[1]
        if new not in vocab:
            vocab[new] = len(vocab)
        nw = {}
        for sym, c in words.items():
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and (sym[i], sym[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return vocab, merges


def tokenizer_json(vocab=None, merges=None, special_ids=None):
    """tokenizer.json of Qwen's kind; defaults: the fixture tokenizer (train_bpe(), SPECIAL_IDS)."""
    if vocab is None:
        vocab, merges = train_bpe()
        assert len(vocab) <= N_BPE
    special_ids = special_ids or SPECIAL_IDS
    added = [{"id": special_ids[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": s not in NON_SPECIAL} for s in SPECIALS]
    bl = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            dict(type="ByteLevel", **bl)]},
        "post_processor": dict(type="ByteLevel", **bl),
        "decoder": dict(type="ByteLevel", **bl),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def tokenizer_config(special_ids=None):
    special_ids = special_ids or SPECIAL_IDS
    tpl = open(TEMPLATE).read()
    dec = {str(special_ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False, "special": s not in NON_SPECIAL} for s in SPECIALS}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": dec, "bos_token": None,
            "chat_template": tpl, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": 4096, "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


def write_tokenizer(d):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "chat_template.json"), "w") as f:
        json.dump({"chat_template": open(TEMPLATE).read()}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump({"size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS}, "patch_size": 16,
                   "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                   "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
                   "image_processor_type": "Qwen2VLImageProcessorFast"}, f, indent=4)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": ENDOFTEXT, "pad_token_id": ENDOFTEXT, "do_sample": True,
                   "eos_token_id": [IM_END, ENDOFTEXT], "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0,
                   "temperature": 0.7}, f, indent=4)

# ---------------------------------------------------------------------------------------------
# conversations (QWEN3VL.md §7)


SCENARIOS = {
    "text": [{"role": "user", "content": [{"type": "text", "text": "Hello, who are you?"}]}],
    "image": [{"role": "user", "content": [{"type": "image", "image": "a.png"},
                                           {"type": "text", "text": "What is in this image?"}]}],
    "two_images": [{"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
                   {"role": "user", "content": [{"type": "image", "image": "a.png"},
                                                {"type": "image", "image": "b.png"},
                                                {"type": "text", "text": "Compare the two pictures."}]}],
    "multi_turn": [{"role": "user", "content": [{"type": "image", "image": "c.png"},
                                                {"type": "text", "text": "Describe it."}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "A red square on a blue background."}]},
                   {"role": "user", "content": [{"type": "text", "text": "What colour is it?"}]}],
}


def render_manual(messages):
    out = ""
    for m in messages:
        out += "<|im_start|>" + m["role"] + "\n"
        for c in m["content"]:
            out += "<|vision_start|><|image_pad|><|vision_end|>" if c["type"] == "image" else c["text"]
        out += "<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def rope_index_np(ids, grids, merge=2):
    """QWEN3VL.md §6.5, for cross-checking what transformers passes to the language model."""
    pos = np.zeros((3, len(ids)), dtype=np.int64)
    cur, i, img = 0, 0, 0
    while i < len(ids):
        if ids[i] == IMAGE_PAD:
            _, gh, gw = grids[img]
            Gh, Gw = gh // merge, gw // merge
            for k in range(Gh * Gw):
                pos[:, i + k] = (cur, cur + k // Gw, cur + k % Gw)
            i += Gh * Gw
            cur += max(Gh, Gw)
            img += 1
        else:
            pos[:, i] = cur
            cur += 1
            i += 1
    return pos, int(pos.max() + 1 - len(ids))

# ---------------------------------------------------------------------------------------------
# models


MODELS = {
    # GQA 4/2, head_dim 32 != 64/4, DeepStack [0, 2] at vision depth 3, 8x8 position grid, tied.
    "tiny-gqa": dict(
        text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, rope_theta=5000000.0, mrope_section=[6, 5, 5]),
        vision=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 2]),
        tied=True, fp8=False, bf16_logits=True, seed=1),
    # MQA 4/1, head_dim 16 != 48/4, theta 1e4, odd mrope sections, one DeepStack tap, 12x12 grid,
    # vision head_dim 12, untied lm_head.
    "tiny-mqa": dict(
        text=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=16, rope_theta=10000.0, mrope_section=[2, 3, 3]),
        vision=dict(depth=2, hidden_size=48, intermediate_size=96, num_heads=4, num_position_embeddings=144,
                    deepstack_visual_indexes=[1]),
        tied=False, fp8=False, bf16_logits=False, seed=2),
    # Qwen's block-FP8 format: decoder linears are multiples of 128; 48x48 grid as the real models.
    "tiny-fp8": dict(
        text=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=128, rope_theta=5000000.0, mrope_section=[24, 20, 20]),
        vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=2304,
                    deepstack_visual_indexes=[0]),
        tied=True, fp8=True, bf16_logits=False, seed=3),
}
N_GREEDY = 24
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def config_kwargs(spec, tied):
    """Qwen3VLConfig's keyword arguments for a spec of MODELS' kind (its "text" and "vision"
    dicts): the one place the tiny Qwen3-VL configs are built (tools/ref_models.py's tiny-8b too).
    Plain Python, no torch."""
    t, v = spec["text"], spec["vision"]
    text_cfg = dict(vocab_size=VOCAB, hidden_size=t["hidden_size"], intermediate_size=t["intermediate_size"],
                    num_hidden_layers=t["num_hidden_layers"], num_attention_heads=t["num_attention_heads"],
                    num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"], hidden_act="silu",
                    max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.08,
                    tie_word_embeddings=tied, bos_token_id=ENDOFTEXT, eos_token_id=IM_END,
                    pad_token_id=ENDOFTEXT, attention_bias=False,
                    rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"],
                                     "mrope_section": t["mrope_section"], "mrope_interleaved": True})
    vis_cfg = dict(depth=v["depth"], hidden_size=v["hidden_size"], hidden_act="gelu_pytorch_tanh",
                   intermediate_size=v["intermediate_size"], num_heads=v["num_heads"], in_channels=3,
                   patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                   out_hidden_size=t["hidden_size"], num_position_embeddings=v["num_position_embeddings"],
                   deepstack_visual_indexes=v["deepstack_visual_indexes"], initializer_range=0.08)
    return dict(text_config=text_cfg, vision_config=vis_cfg, image_token_id=IMAGE_PAD,
                video_token_id=SPECIAL_IDS["<|video_pad|>"], vision_start_token_id=SPECIAL_IDS["<|vision_start|>"],
                vision_end_token_id=SPECIAL_IDS["<|vision_end|>"], tie_word_embeddings=tied)


def init_weights(model, seed, torch):
    """Our own init, whatever the library's defaults: weights N(0, 0.08) (QWEN3VL.md §11: the
    default 0.02 gives nearly flat logits), norms 1 + N(0, 0.3), biases N(0, 0.1), so that a
    wrong implementation is visible.  One generator seeded 100 + seed, parameters in order."""
    gen = torch.Generator().manual_seed(100 + seed)
    for name, p in model.named_parameters():
        if "norm" in name and name.endswith(".weight"):
            p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
        elif name.endswith(".bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.08 * torch.randn(p.shape, generator=gen))


def save_npy(d, name, arr):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(arr))


def run_models(out_root):
    import torch
    import tokenizers
    import transformers
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.set_grad_enabled(False)
    log = lambda *a: print(*a, flush=True)
    log("torch", torch.__version__, "transformers", transformers.__version__,
        "cuda", torch.cuda.is_available())

    tok_path = os.path.join(TOK_DIR, "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_path)
    tpl = open(TEMPLATE).read()
    try:
        from transformers import PreTrainedTokenizerFast
        hf_tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    except Exception as e:  # noqa
        log("PreTrainedTokenizerFast failed:", repr(e))
        hf_tok = None

    # --- shared inputs: prompt, ids, pixel values, grids
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    except Exception:
        from transformers import Qwen2VLImageProcessor
    from torchvision.io import decode_image, ImageReadMode
    ip = Qwen2VLImageProcessor(size={"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS}, patch_size=16,
                               temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    inputs = {}
    for sname, msgs in SCENARIOS.items():
        text = render_manual(msgs)
        how = "manual"
        if hf_tok is not None:
            try:
                t2 = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, chat_template=tpl)
                if t2 != text:
                    log(f"[{sname}] template render differs from manual:\n{t2!r}\n{text!r}")
                text, how = t2, "apply_chat_template"
            except Exception as e:  # noqa
                log(f"[{sname}] apply_chat_template failed: {e!r}")
        paths = [os.path.join(IMG_DIR, c["image"]) for m in msgs for c in m["content"] if c["type"] == "image"]
        pv, grid = None, np.zeros((0, 3), dtype=np.int64)
        if paths:
            imgs = [decode_image(p, mode=ImageReadMode.RGB) for p in paths]
            o = ip(images=imgs, return_tensors="pt")
            pv = o["pixel_values"].float().numpy()
            grid = o["image_grid_thw"].numpy().astype(np.int64)
        parts = text.split("<|image_pad|>")
        assert len(parts) == len(grid) + 1
        expanded = parts[0]
        for g, p in zip(grid, parts[1:]):
            expanded += "<|image_pad|>" * int(g.prod() // 4) + p
        ids = np.array(tok.encode(expanded, add_special_tokens=False).ids, dtype=np.int64)
        mm = (ids == IMAGE_PAD).astype(np.int64)
        assert mm.sum() == sum(int(g.prod() // 4) for g in grid)
        d = os.path.join(out_root, "inputs", sname)
        save_npy(d, "input_ids", ids)
        save_npy(d, "mm_token_type_ids", mm)
        save_npy(d, "image_grid_thw", grid)
        if pv is not None:
            save_npy(d, "pixel_values", pv.astype(np.float32))
        pos_np, delta_np = rope_index_np(ids.tolist(), grid.tolist())
        inputs[sname] = dict(text=text, render=how, ids=ids, mm=mm, pv=pv, grid=grid, pos_np=pos_np,
                             delta_np=delta_np, images=[os.path.basename(p) for p in paths], dir=d)
        log(f"[{sname}] {len(ids)} tokens, grids {grid.tolist()}, render {how}")

    def model_inputs(sname, ids=None, mm=None, dtype=torch.float32, device="cpu"):
        s = inputs[sname]
        ids = s["ids"] if ids is None else ids
        mm = s["mm"] if mm is None else mm
        kw = dict(input_ids=torch.tensor(ids[None], device=device),
                  attention_mask=torch.ones((1, len(ids)), dtype=torch.long, device=device),
                  mm_token_type_ids=torch.tensor(mm[None], device=device))
        if s["pv"] is not None:
            kw["pixel_values"] = torch.tensor(s["pv"], dtype=dtype, device=device)
            kw["image_grid_thw"] = torch.tensor(s["grid"], device=device)
        return kw

    manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "vocab_size": VOCAB,
                "special_ids": SPECIAL_IDS, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
                "hidden_layout": "hidden[i] = input of decoder layer i (i < L); hidden[L] = last layer output "
                                 "before the final norm; DeepStack additions of layer i-1 are in hidden[i]",
                "scenarios": {}, "models": {}}
    for sname, s in inputs.items():
        manifest["scenarios"][sname] = dict(text=s["text"], render=s["render"], images=s["images"],
                                            n_tokens=int(len(s["ids"])), grid_thw=s["grid"].tolist(),
                                            messages=SCENARIOS[sname])

    def one_model(mname, spec):
        log(f"=== {mname}")
        torch.manual_seed(spec["seed"])
        t = spec["text"]
        cfg = Qwen3VLConfig(**config_kwargs(spec, spec["tied"]))
        model = Qwen3VLForConditionalGeneration(cfg)
        init_weights(model, spec["seed"], torch)
        if spec["fp8"]:
            # Per-128-block gains so that every block of a linear gets a different scale.
            for name, p in model.named_parameters():
                if name.startswith("model.language_model.layers.") and any(l in name for l in LINEARS):
                    o, i = p.shape
                    g = torch.tensor([[0.5 + 0.37 * ((a * 3 + b) % 5) for b in range(i // 128)]
                                      for a in range(o // 128)])
                    p.mul_(g.repeat_interleave(128, 0).repeat_interleave(128, 1))
        model = model.to(torch.bfloat16)
        mdir = os.path.join(out_root, mname)
        ckpt = os.path.join(mdir, "model")
        model.save_pretrained(ckpt)
        write_tokenizer(ckpt)
        qinfo = None
        if spec["fp8"]:
            qinfo = quantize_fp8(ckpt, torch, log)

        # --- the fp32 reference: the saved checkpoint loaded in float32 (CPU, eager)
        deq_max = None
        if spec["fp8"]:
            ref, deq_max = load_fp8_reference(ckpt, cfg, torch, log)
        else:
            ref = Qwen3VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                                  attn_implementation="eager")
        ref = ref.float().eval()
        sd_names = sorted(list_tensors(ckpt))
        mani = dict(spec=spec, checkpoint="model", tensors=len(sd_names),
                    lm_head_stored=any(n == "lm_head.weight" for n in sd_names), fp8=qinfo,
                    fp8_dequant_vs_manual_max_abs=deq_max, scenarios={})
        bf, bf_dev = None, "cuda" if torch.cuda.is_available() else "cpu"
        if spec["bf16_logits"]:
            # transformers' default bf16 run (sdpa), for the CUDA backend's test
            bf = Qwen3VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.bfloat16).to(bf_dev).eval()
            mani["bf16_logits_device"] = bf_dev
        log("config.json:", open(os.path.join(ckpt, "config.json")).read())
        lm = ref.model.language_model
        visual = ref.model.visual
        L = len(lm.layers)

        for sname, s in inputs.items():
          hooks = []
          try:
            rec = {}

            def pre_layer(i):
                def f(mod, args, kwargs):
                    hs = args[0] if args else kwargs["hidden_states"]
                    rec.setdefault("layer_in", {})[i] = hs.detach().float().clone()
                return f

            def post_last(mod, args, kwargs, out):
                o = out[0] if isinstance(out, (tuple, list)) else out
                rec["last_out"] = o.detach().float().clone()

            def lm_pre(mod, args, kwargs):
                if kwargs.get("position_ids") is not None:
                    rec["position_ids"] = kwargs["position_ids"].detach().clone()

            def merger_post(k):
                # The mergers' outputs directly: independent of the container the tower returns.
                def f(mod, args, kwargs, out):
                    rec.setdefault("mergers", {}).setdefault(k, []).append(out.detach().float().clone())
                return f

            def vblock_pre(i):
                def f(mod, args, kwargs):
                    if i == 0:
                        hs = args[0] if args else kwargs["hidden_states"]
                        rec.setdefault("vis_in", []).append(hs.detach().float().clone())
                return f

            def vblock_post(i):
                def f(mod, args, kwargs, out):
                    o = out[0] if isinstance(out, (tuple, list)) else out
                    rec.setdefault("vis_blocks", {}).setdefault(i, []).append(o.detach().float().clone())
                return f

            for i, layer in enumerate(lm.layers):
                hooks.append(layer.register_forward_pre_hook(pre_layer(i), with_kwargs=True))
            hooks.append(lm.layers[L - 1].register_forward_hook(post_last, with_kwargs=True))
            hooks.append(lm.register_forward_pre_hook(lm_pre, with_kwargs=True))
            hooks.append(visual.merger.register_forward_hook(merger_post(-1), with_kwargs=True))
            for k, dm in enumerate(visual.deepstack_merger_list):
                hooks.append(dm.register_forward_hook(merger_post(k), with_kwargs=True))
            for i, blk in enumerate(visual.blocks):
                hooks.append(blk.register_forward_pre_hook(vblock_pre(i), with_kwargs=True))
                hooks.append(blk.register_forward_hook(vblock_post(i), with_kwargs=True))
            out = ref(**model_inputs(sname))
            for h in hooks:
                h.remove()
            d = os.path.join(mdir, sname)
            logits = out.logits[0].float().numpy()
            save_npy(d, "logits", logits.astype(np.float32))
            hidden = [rec["layer_in"][i][0].numpy() for i in range(L)] + [rec["last_out"][0].numpy()]
            save_npy(d, "hidden", np.stack(hidden).astype(np.float32))
            info = dict(n_tokens=int(len(s["ids"])), logits_max_abs=float(np.abs(logits).max()))
            # position ids as given to the language model (5.17 passes 4 rows: text + t, h, w)
            if "position_ids" in rec:
                p = rec["position_ids"].cpu().numpy()
                p = p[:, 0, :] if p.ndim == 3 else p[None].repeat(3, 0)
                if p.shape[0] == 4:
                    p = p[1:]
                info["position_ids_match_spec"] = bool(np.array_equal(p, s["pos_np"]))
                if not info["position_ids_match_spec"]:
                    log(f"[{mname}/{sname}] position ids differ from §6.5")
                save_npy(s["dir"], "position_ids", p.astype(np.int64))
            else:
                save_npy(s["dir"], "position_ids", s["pos_np"])
                info["position_ids_match_spec"] = None
            rd = getattr(out, "rope_deltas", None)
            if rd is None:
                rd = getattr(ref.model, "rope_deltas", None)
            info["rope_delta"] = int(rd.reshape(-1)[0]) if rd is not None else None
            info["rope_delta_spec"] = s["delta_np"]
            if "mergers" in rec:
                mg = rec["mergers"]
                emb = torch.cat(mg[-1]).numpy()
                ds = [torch.cat(mg[k]).numpy() for k in range(len(visual.deepstack_merger_list))]
                log(f"[{mname}/{sname}] image embeds {emb.shape}, deepstack {[x.shape for x in ds]}, "
                    f"merger calls {len(mg[-1])}")
                assert emb.shape == (int(s["mm"].sum()), t["hidden_size"]), emb.shape
                save_npy(d, "image_embeds", emb.astype(np.float32))
                save_npy(d, "deepstack", np.stack(ds).astype(np.float32))
                save_npy(d, "vision_blocks", np.stack([torch.cat(rec["vis_in"]).numpy()] +
                                                      [torch.cat(rec["vis_blocks"][i]).numpy()
                                                       for i in range(len(visual.blocks))]).astype(np.float32))
                info["image_embeds_shape"] = list(emb.shape)
            # --- greedy: argmax of transformers' logits, 24 tokens, no stop (full recompute each step)
            ids, mm = s["ids"].copy(), s["mm"].copy()
            toks, margins = [], []
            for _ in range(N_GREEDY):
                lo = ref(**model_inputs(sname, ids, mm)).logits[0, -1].float()
                top = torch.topk(lo, 2)
                toks.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
                ids = np.append(ids, toks[-1])
                mm = np.append(mm, 0)
            info["greedy"] = toks
            info["greedy_margins"] = margins
            info["greedy_min_margin"] = min(margins)
            # transformers' own generate (KV cache, decode positions p + rope_delta), for agreement
            try:
                gc = copy.deepcopy(ref.generation_config)
                gc.do_sample, gc.max_new_tokens, gc.min_new_tokens = False, N_GREEDY, None
                gc.temperature, gc.top_p, gc.top_k = None, None, None
                gc.eos_token_id = [IM_END, ENDOFTEXT]
                gc.pad_token_id = ENDOFTEXT
                g = ref.generate(**model_inputs(sname), generation_config=gc)
                gen_toks = g[0, len(s["ids"]):].tolist()
                info["generate"] = gen_toks
                n = len(gen_toks)
                info["generate_agrees"] = gen_toks == toks[:n]
            except Exception as e:  # noqa
                log(f"[{mname}/{sname}] generate failed: {e!r}")
                info["generate"] = None
            if bf is not None:
              try:
                lb = bf(**model_inputs(sname, dtype=torch.bfloat16, device=bf_dev)).logits[0].float().cpu().numpy()
                save_npy(d, "logits_bf16", lb.astype(np.float32))
                info["bf16_vs_fp32_max_abs"] = float(np.abs(lb - logits).max())
              except Exception:  # noqa
                traceback.print_exc()
            log(f"[{mname}/{sname}] T={info['n_tokens']} max|logit|={info['logits_max_abs']:.3f} "
                f"greedy={toks[:8]}... min margin {info['greedy_min_margin']:.4f} "
                f"generate agrees={info.get('generate_agrees')} rope_delta={info['rope_delta']}/{s['delta_np']} "
                f"pos ok={info['position_ids_match_spec']}")
            mani["scenarios"][sname] = info
          except Exception:  # noqa: keep going, so one failure does not cost the whole run
            for h in hooks:
                h.remove()
            traceback.print_exc()
            mani["scenarios"][sname] = {"error": traceback.format_exc()}
            continue
        manifest["models"][mname] = mani
        del ref, bf

    for mname, spec in MODELS.items():
        try:
            one_model(mname, spec)
        except Exception:  # noqa: the other models still get recorded
            traceback.print_exc()
            manifest["models"][mname] = {"error": traceback.format_exc()}

    with open(os.path.join(out_root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log("done")


def list_tensors(ckpt):
    from safetensors import safe_open
    names = []
    for fn in os.listdir(ckpt):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(ckpt, fn), "pt") as f:
                names += list(f.keys())
    return names


def quantize_fp8(ckpt, torch, log):
    """Rewrite the decoder linears of ckpt/model.safetensors in Qwen's block-FP8 format (§2)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(ckpt, "model.safetensors")
    sd = load_file(path)
    n = 0
    for name in list(sd):
        if name.startswith("model.language_model.layers.") and name.endswith(".weight") and \
                any("." + l + "." in name for l in LINEARS):
            w = sd[name].float()
            o, i = w.shape
            assert o % 128 == 0 and i % 128 == 0, name
            blk = w.view(o // 128, 128, i // 128, 128)
            amax = blk.abs().amax(dim=(1, 3)).clamp(min=1e-12)
            scale = 448.0 / amax
            q = (blk * scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(o, i)
            sd[name] = q.contiguous()
            sd[name[:-len(".weight")] + ".weight_scale_inv"] = (1.0 / scale).float().contiguous()
            n += 1
    save_file(sd, path, metadata={"format": "pt"})
    cfgp = os.path.join(ckpt, "config.json")
    cfg = json.load(open(cfgp))
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "model.visual"]}
    json.dump(cfg, open(cfgp, "w"), indent=2)
    log(f"fp8: {n} linears quantized")
    return {"n_linears": n}


def load_fp8_reference(ckpt, cfg, torch, log):
    """transformers' dequantized FP8 model, checked against bf16(q * scale_inv) done by hand."""
    from safetensors.torch import load_file
    from transformers import Qwen3VLForConditionalGeneration
    sd = load_file(os.path.join(ckpt, "model.safetensors"))
    manual = {}
    for name in list(sd):
        if name.endswith(".weight_scale_inv"):
            w = name[:-len("_scale_inv")]
            s = sd[name].repeat_interleave(128, 0).repeat_interleave(128, 1)
            manual[w] = (sd[w].float() * s).to(torch.bfloat16)
    ref, deq = None, None
    try:
        from transformers import FineGrainedFP8Config
        ref = Qwen3VLForConditionalGeneration.from_pretrained(
            ckpt, quantization_config=FineGrainedFP8Config(dequantize=True), dtype=torch.bfloat16,
            attn_implementation="eager", device_map="cpu")
        params = dict(ref.named_parameters())
        for w in manual:
            if params[w].dtype != torch.bfloat16:
                raise RuntimeError(f"{w} loaded as {params[w].dtype}, not dequantized")
        deq = 0.0
        for w, m in manual.items():
            deq = max(deq, float((params[w].detach().float().cpu() - m.float()).abs().max()))
        log(f"fp8: transformers dequantize=True vs bf16(q*s): max abs {deq}")
    except Exception as e:  # noqa
        log(f"fp8: FineGrainedFP8Config(dequantize=True) failed ({e!r}); using bf16(q*s) by hand")
        ref = Qwen3VLForConditionalGeneration(cfg).to(torch.bfloat16)
        full = {k: v for k, v in sd.items() if not k.endswith("_scale_inv")}
        full.update(manual)
        missing, unexpected = ref.load_state_dict(full, strict=False)
        log("manual fp8 load: missing", missing, "unexpected", unexpected)
        ref.config._attn_implementation = "eager"
    return ref.to("cpu"), deq


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "images":
        make_images()
        write_tokenizer(TOK_DIR)
        print("images and tokenizer written to", FIX)
    elif len(sys.argv) >= 3 and sys.argv[1] == "models":
        run_models(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
