#!/usr/bin/env python3
"""train_demo.py: the demo model: a small Qwen3-VL trained on the synthetic scenes of demo_data.py.

  /usr/bin/python3 tools/train_demo.py tokenizer DIR
      (here, numpy only) the tokenizer files: a byte-level BPE of Qwen's kind (Qwen's split regex,
      ByteLevel, NFC, Qwen's 26 special tokens right after the BPE vocabulary) trained on the
      texts of 3,000 scenes, plus tokenizer_config.json, chat_template.json,
      preprocessor_config.json and generation_config.json (greedy).
  python3 tools/train_demo.py train OUT [--steps N] [--seed 0] [--seconds S] [--init MODEL_DIR]
                                   [--lr F] [--warmup N] [--first-scene I] [--eval-seconds S]
                                   [--autocast 1|0] [--batch-scenes N] [--pixels P] [--max-steps N]
                                   [--grounding K] [--questions N] [--ground-tokens T] [--dry-run]
      (GPU machine: torch 2.11, transformers 5.17) builds the model with transformers
      (Qwen3VLForConditionalGeneration: vision tower with DeepStack, Qwen3 decoder with
      interleaved MRoPE), trains it with AdamW under bf16 autocast (--autocast 0: fp32/TF32), loss on the answer tokens only
      (teacher forcing; every conversation weighs the same), saves it in bf16 with save_pretrained
      into OUT/demo, then evaluates greedy decoding through transformers (fp32 on the saved bf16
      weights, TF32 off) on 1,000 held-out scenes, and records batch-1 greedy outputs of 20 of them
      as the iris-vs-transformers fixture.  Without --steps the step count is fixed after 20 timed
      steps so that training ends after --seconds (default TRAIN_SECONDS);
      --init goes on from a saved model (its weights only: the tokenizer and preprocessor files are
      written anew); --pixels P: smart_resize's min_pixels = max_pixels = P (default 65536), used by the
      training preprocessing, its check and the evaluation, and written into OUT/demo/preprocessor_config.json;
      scenes are seeds --first-scene and up, and tools/demo_seeds.py must allow them: before numpy or
      torch is imported, a run whose scenes (--steps x --batch-scenes, or with --seconds at most
      --max-steps x --batch-scenes, by default the room left in the run's training range) would
      leave its training range or enter any other range is refused (exit 2); --dry-run stops there.
      A scene gives a caption, an analysis, --questions N (3) questions and --grounding K (1) grounding
      conversations (demo_data.grounding); --ground-tokens T weighs a grounding conversation by its
      answer tokens / T (1 to GROUND_WEIGHT_MAX; 0, the default: 1 like the others).  The greedy evaluation
      (the first N_EVAL scenes of the evaluation range, demo_data.eval_items) stops after
      --eval-seconds with what it has; the count used is in OUT/eval/eval.json.
      Outputs: OUT/demo (model dir), OUT/eval (eval.json, images/), OUT/fixture (greedy.json, images/:
      batch-1 answers on the first N_FIXTURE scenes of the fixture range).
  python3 tools/train_demo.py hf-eval MODEL_DIR OUT [--eval-seconds S]
      (GPU machine) train's evaluation alone, of a saved model (e.g. the shipped one): OUT/eval, OUT/fixture.
  /usr/bin/python3 tools/train_demo.py make-eval EVAL_DIR [--n N] [--grounding 1|0]
      (here, numpy only) eval.json and images/ of the first N scenes of the evaluation range, without
      transformers' outputs, for iris-eval alone.
  /usr/bin/python3 tools/train_demo.py iris-eval EVAL_DIR MODEL [--limit N] [--bin build/demo/bench/demo_eval]
      (here) the same items through iris (bench/demo_eval.c, greedy on the CPU): accuracy (demo_data's
      scoring) and, when eval.json holds transformers' outputs, agreement with them, written to
      EVAL_DIR/iris_eval.json.

The exact command of the shipped model is in models/demo/README.md.
"""
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_seeds  # noqa: E402  (standard library only)

MAX_STEPS = 40000
BATCH_SCENES = 48               # scenes per step; each gives 5 conversations (caption, analysis, 3 questions) + grounding


def _opt(a, name, default=None):
    return a[a.index(name) + 1] if name in a else default


def seed_guard(a):
    """For `train`: (steps cap, None) if tools/demo_seeds.py allows the run's scenes, else (0, reason).
    With --steps the scenes are steps x batch; with --seconds the cap is --max-steps, by default the
    room left in the training range of --first-scene, so that the run cannot leave it."""
    first, batch = int(_opt(a, "--first-scene", 0)), int(_opt(a, "--batch-scenes", BATCH_SCENES))
    if _opt(a, "--steps"):
        cap = int(_opt(a, "--steps"))
    else:
        cap = int(_opt(a, "--max-steps", min(MAX_STEPS, demo_seeds.room(first) // batch)))
    why = demo_seeds.guard(first, cap * batch)
    return (0, why) if why else (cap, None)


if __name__ == "__main__" and sys.argv[1:2] == ["train"]:     # before numpy and torch: refuses anywhere
    _cap, _why = seed_guard(sys.argv[1:])
    if _why:
        print(f"train_demo.py: refused by tools/demo_seeds.py: {_why}", file=sys.stderr)
        sys.exit(2)
    if "--dry-run" in sys.argv:
        _a = sys.argv[1:]
        _first, _batch = int(_opt(_a, "--first-scene", 0)), int(_opt(_a, "--batch-scenes", BATCH_SCENES))
        print(f"train_demo.py: allowed: scenes {_first}-{_first + _cap * _batch - 1} at most ({_cap} steps)")
        sys.exit(0)

import numpy as np  # noqa: E402

import demo_data as D  # noqa: E402
import make_tiny_models as T  # noqa: E402

# ---------------------------------------------------------------------------------------------
# vocabulary, special tokens, model shape

N_BPE_MAX = 992                 # byte tokens + merges, at most; the specials follow the BPE vocabulary
VOCAB_SIZE = 640                # embedding rows (>= BPE vocabulary + 26 specials)
# Image areas of smart_resize (preprocessor_config.json size.shortest_edge / longest_edge).  The scenes are
# 80-256 px a side: min_pixels = max_pixels = 256*256 (Qwen3-VL's own shortest_edge) upscales every scene to
# 65,536-82,944 px (smart_resize rounds the sides up and does not recheck the maximum: 239x239 -> 288x288), so a
# small shape covers several 16-px patches (from run 16 on; runs 1-15: min_pixels 64*64, scenes at their own size)
# `train --pixels P` sets both to P (run 19: 131072 = 2 * 256*256: every scene to 131,072-155,648 px, 1.95x the
# vision patches of 65536 on the held-out scenes, 4.9x those of the scenes' own sizes)
MIN_PIXELS, MAX_PIXELS = 256 * 256, 256 * 256


def set_pixels(p):
    """min_pixels = max_pixels = p for everything below (tokenizer files, smart_resize, the HF processor)."""
    global MIN_PIXELS, MAX_PIXELS
    MIN_PIXELS, MAX_PIXELS = int(p), int(p)


TEXT = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, rope_theta=5000000.0, mrope_section=[12, 10, 10])
VISION = dict(depth=4, hidden_size=192, intermediate_size=768, num_heads=3, num_position_embeddings=256,
              deepstack_visual_indexes=[1, 2])
SEED = 0
N_QUESTIONS = 3
GROUND_WEIGHT_MAX = 2.0
LR, WARMUP, WD = 2e-3, 150, 0.05
TRAIN_SECONDS = 285             # wall-clock budget of the training loop when --steps is not given
# the evaluation's and the fixture's scenes: tools/demo_seeds.py (outside every training range)
EVAL_SEED0, N_EVAL = demo_seeds.EVAL_FIRST, 500
FIXTURE_SEED0, N_FIXTURE = demo_seeds.FIXTURE_FIRST, 12
MAX_NEW = {"caption": 64, "analysis": 128, "vqa": 16, "grounding": 288}


def corpus():
    rng = np.random.default_rng(7)
    texts = [D.CAPTION_PROMPT, D.DESCRIBE_PROMPT, "You are a helpful assistant."]
    for seed in range(3000):
        sc = D.make_scene(1_000_000_000 + seed)
        texts += [a for _, _, a in D.examples(sc, rng, 4)]
        texts += [q for _, q, _ in D.questions(sc, rng)]
    return "\n".join(texts) + "\n"


def build_tokenizer():
    vocab, merges = T.train_bpe(corpus(), N_BPE_MAX)
    special_ids = {s: len(vocab) + i for i, s in enumerate(T.SPECIALS)}
    assert len(vocab) + len(T.SPECIALS) <= VOCAB_SIZE
    return T.tokenizer_json(vocab, merges, special_ids), special_ids


def write_tokenizer(d):
    os.makedirs(d, exist_ok=True)
    tj, sp = build_tokenizer()
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(T.tokenizer_config(sp), f, ensure_ascii=False, indent=1)
    tpl = open(T.TEMPLATE).read()
    with open(os.path.join(d, "chat_template.json"), "w") as f:
        json.dump({"chat_template": tpl}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump({"size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS}, "patch_size": 16,
                   "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                   "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
                   "image_processor_type": "Qwen2VLImageProcessorFast"}, f, indent=2)
    write_generation_config(d, sp)
    return sp


def write_generation_config(d, sp):
    eot, eos = sp["<|endoftext|>"], sp["<|im_end|>"]
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eot, "pad_token_id": eot, "eos_token_id": [eos, eot], "do_sample": False,
                   "repetition_penalty": 1.0}, f, indent=2)

# ---------------------------------------------------------------------------------------------
# preprocessing (QWEN3VL.md §4): smart_resize, then patchify of the uint8 image


def smart_resize(h, w, factor=32, min_pixels=None, max_pixels=None):
    min_pixels = MIN_PIXELS if min_pixels is None else min_pixels
    max_pixels = MAX_PIXELS if max_pixels is None else max_pixels
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def patchify(x):
    """x: float [3, h, w] (torch or numpy, already normalised) -> [gh*gw, 1536] in HF's order (§4.5)."""
    c, h, w = x.shape
    gh, gw = h // 16, w // 16
    p = x.reshape(c, gh // 2, 2, 16, gw // 2, 2, 16)            # c, bh, mh, py, bw, mw, px
    p = p.permute(1, 4, 2, 5, 0, 3, 6) if hasattr(p, "permute") else p.transpose(1, 4, 2, 5, 0, 3, 6)
    p = p[:, :, :, :, :, None]                                   # temporal axis after the channel
    if hasattr(p, "expand"):
        p = p.expand(gh // 2, gw // 2, 2, 2, c, 2, 16, 16)
    else:
        p = np.broadcast_to(p, (gh // 2, gw // 2, 2, 2, c, 2, 16, 16))
    return p.reshape(gh * gw, c * 2 * 16 * 16)


def chat_ids(tok, sp, n_pad, prompt):
    """The prompt of one user turn (image then text, §7), with the image pads expanded."""
    a = tok.encode("<|im_start|>user\n<|vision_start|>", add_special_tokens=False).ids
    b = tok.encode("<|vision_end|>" + prompt + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).ids
    return a + [sp["<|image_pad|>"]] * n_pad + b

# ---------------------------------------------------------------------------------------------
# training data (worker processes)


def hf_image_processor(pixels=None):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    lo = MIN_PIXELS if pixels is None else pixels
    hi = MAX_PIXELS if pixels is None else pixels
    return Qwen2VLImageProcessor(size={"longest_edge": hi, "shortest_edge": lo}, patch_size=16,
                                 temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)


def u8_patches(rgb, ip, pixels=None):
    """uint8 [h, w, 3] image -> (uint8 patches [N, 3, 256] in HF's row order, one temporal copy; (gh, gw)).
    An image whose size smart_resize keeps is patchified here; one it changes goes through the HF
    processor (its resize), whose normalised values (x - 127.5) / 127.5 are turned back into bytes."""
    import torch
    h, w, _ = rgb.shape
    hb, wb = smart_resize(h, w, min_pixels=pixels, max_pixels=pixels)
    if (hb, wb) == (h, w):
        p = patchify(np.ascontiguousarray(rgb.transpose(2, 0, 1)))        # [N, 1536], t copies equal
        return torch.from_numpy(np.ascontiguousarray(p.reshape(-1, 3, 2, 256)[:, :, 0, :])), (h // 16, w // 16)
    o = ip(images=[torch.from_numpy(rgb).permute(2, 0, 1).contiguous()], return_tensors="pt")
    pv = o["pixel_values"].float()
    u8 = torch.round(pv.view(-1, 3, 2, 256)[:, :, 0, :] * 127.5 + 127.5).clamp(0, 255).to(torch.uint8)
    g = o["image_grid_thw"][0].tolist()
    return u8, (int(g[1]), int(g[2]))


def pixel_values_of(u8):
    """uint8 patches [N, 3, 256] -> pixel_values [N, 1536] (normalised, temporal copy duplicated)."""
    x = (u8.float() - 127.5) / 127.5
    return x[:, :, None, :].expand(-1, 3, 2, 256).reshape(-1, 1536)


def mrope_positions(n_pre, gh, gw, n_after):
    """QWEN3VL.md §6.5 for one image after n_pre text tokens: [3, n] (t, h, w)."""
    Gh, Gw = gh // 2, gw // 2
    pre = np.arange(n_pre)[None].repeat(3, 0)
    k = np.arange(Gh * Gw)
    img = np.stack([np.full(Gh * Gw, n_pre), n_pre + k // Gw, n_pre + k % Gw])
    post = (n_pre + max(Gh, Gw) + np.arange(n_after))[None].repeat(3, 0)
    return np.concatenate([pre, img, post], 1)


class TrainSet:
    """Scene i (seed i) -> its image as uint8 patches and its conversations (token ids, 3-D positions)."""

    def __init__(self, tok_path, sp, n, first=0, pixels=None, grounding=1, questions=N_QUESTIONS, ground_tokens=0):
        self.tok_path, self.sp, self.n, self.first, self.tok, self.ip = tok_path, sp, n, first, None, None
        self.pixels = MIN_PIXELS if pixels is None else pixels
        self.grounding, self.questions, self.ground_tokens = int(grounding), questions, ground_tokens

    def weight(self, task, n_answer):
        """A conversation's loss weight: 1, but a grounding one's answer tokens / ground_tokens (1 to
        GROUND_WEIGHT_MAX) when ground_tokens is set: its loss is a mean over ~35-200 tokens, mostly
        format, so the digits of its corners would otherwise weigh a fraction of a caption's words."""
        if task != "grounding" or not self.ground_tokens:
            return 1.0
        return float(min(GROUND_WEIGHT_MAX, max(1.0, n_answer / self.ground_tokens)))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        if self.tok is None:
            import tokenizers
            torch.set_num_threads(1)
            self.tok = tokenizers.Tokenizer.from_file(self.tok_path)
            self.ip = hf_image_processor(self.pixels)
        i += self.first
        sc = D.make_scene(i)
        u8, (gh, gw) = u8_patches(D.render(sc), self.ip, self.pixels)
        n_pad = gh * gw // 4
        rng = np.random.default_rng([i, 5])
        seqs = []
        convs = D.examples(sc, rng, self.questions)
        for _ in range(self.grounding):
            convs.append(("grounding",) + D.grounding(sc, rng))
        for task, prompt, answer in convs:
            p = chat_ids(self.tok, self.sp, n_pad, prompt)
            a = self.tok.encode(answer, add_special_tokens=False).ids + [self.sp["<|im_end|>"]]
            n_pre = p.index(self.sp["<|image_pad|>"])
            seqs.append((p, a, mrope_positions(n_pre, gh, gw, len(p) + len(a) - n_pre - n_pad),
                         self.weight(task, len(a))))
        return u8, (gh, gw), seqs


class Collate:
    """Right-padded batch: uint8 patches per scene, conversations per scene, ids, mask, answer mask
    (each answer token holds its conversation's loss weight, 0 elsewhere), position ids [4, S, L]
    (row 0: text positions 0..L-1; rows 1-3: t, h, w; pads 1 as HF does)."""

    def __init__(self, pad_id):
        self.pad_id = pad_id

    def __call__(self, items):
        import torch
        u8s, grids, per, ids, lab, pos = [], [], [], [], [], []
        for u8, g, seqs in items:
            u8s.append(u8)
            grids.append(g)
            per.append(len(seqs))
            for p, a, ps, w in seqs:
                ids.append(p + a)
                lab.append([0.0] * len(p) + [w] * len(a))
                pos.append(ps)
        S, L = len(ids), max(len(x) for x in ids)
        t_ids = torch.full((S, L), self.pad_id, dtype=torch.long)
        t_att = torch.zeros((S, L), dtype=torch.long)
        t_lab = torch.zeros((S, L), dtype=torch.float32)
        t_pos = torch.ones((4, S, L), dtype=torch.long)
        t_pos[0] = torch.arange(L)[None]
        for k, (x, y, ps) in enumerate(zip(ids, lab, pos)):
            t_ids[k, :len(x)] = torch.tensor(x)
            t_att[k, :len(x)] = 1
            t_lab[k, :len(y)] = torch.tensor(y, dtype=torch.float32)
            t_pos[1:, k, :len(x)] = torch.from_numpy(ps)
        return torch.cat(u8s), torch.tensor(grids), torch.tensor(per), t_ids, t_att, t_lab, t_pos


class DedupVision:
    """Runs the vision tower once per distinct image of a batch (each scene's image appears once per
    conversation) and repeats its outputs row-wise, so the model sees exactly what it would have
    computed on the repeated images.  `plan` = (per, grids): conversations per scene, (gh, gw) per scene."""

    def __init__(self, visual):
        self.visual, self.orig, self.plan = visual, visual.forward, None

    def install(self):
        self.visual.forward = self.forward

    def forward(self, *args, **kw):
        import torch
        if self.plan is None:
            return self.orig(*args, **kw)
        per, grids = self.plan
        hs = args[0] if args else kw.pop("hidden_states", None)
        args = args[1:]
        if "grid_thw" in kw:
            kw.pop("grid_thw")
        elif args:
            args = args[1:]
        dev = hs.device
        n_patch = [gh * gw for gh, gw in grids]
        off = np.concatenate([[0], np.cumsum([n * k for n, k in zip(n_patch, per)])])
        rows = np.concatenate([np.arange(off[j], off[j] + n_patch[j]) for j in range(len(grids))])
        uniq_grid = torch.tensor([[1, gh, gw] for gh, gw in grids], device=dev)
        out = self.orig(hs[torch.from_numpy(rows).to(dev)], *args, grid_thw=uniq_grid, **kw)
        u_off = np.concatenate([[0], np.cumsum(n_patch)])
        idx_p = np.concatenate([np.arange(u_off[j], u_off[j + 1]) for j in range(len(grids)) for _ in range(per[j])])
        idx_t = np.concatenate([np.arange(u_off[j] // 4, u_off[j + 1] // 4)
                                for j in range(len(grids)) for _ in range(per[j])])
        n_p, n_t = int(u_off[-1]), int(u_off[-1]) // 4
        ip_, it_ = torch.from_numpy(idx_p).to(dev), torch.from_numpy(idx_t).to(dev)

        def expand(o):
            if isinstance(o, torch.Tensor) and o.ndim >= 1:
                if o.shape[0] == n_t:
                    return o[it_]
                if o.shape[0] == n_p:
                    return o[ip_]
                return o
            if isinstance(o, dict):
                return type(o)(**{k: expand(v) for k, v in o.items()})
            if isinstance(o, (list, tuple)):
                return type(o)(expand(v) for v in o)
            return o
        return expand(out)


class FastVision:
    """The vision tower's attention in one call for all the images of a batch: the images padded to the
    longest one, the padded keys masked out.  transformers' vision attention (other than flash-attention
    2's) loops over the images, one attention call each, per layer, forward and backward: with 96 images
    a step that loop was a large part of a step's time (181.5 -> 114.4 ms a step on the H100, run 12 ->
    run 13).  Used only when it gives the plain forward's logits and then its gradients on the first
    batch (checked in run_train); off, the library's attention runs."""

    def __init__(self, visual):
        self.visual, self.attn_on, self.layout = visual, False, None
        self.rope = sys.modules[type(visual).__module__].apply_rotary_pos_emb_vision

    def describe(self):
        import inspect
        return (f"vision forward{inspect.signature(type(self.visual).forward)}, attention forward"
                f"{inspect.signature(type(self.visual.blocks[0].attn).forward)}")

    def install(self):
        for blk in self.visual.blocks:
            blk.attn.forward = self.attention(blk.attn, blk.attn.forward)

    def packing(self, cu_seqlens):
        """(cu_seqlens, destination rows in the padded [B * Lmax] layout, key mask [B, 1, 1, Lmax], B, Lmax),
        computed once per vision forward (the same cu_seqlens tensor reaches every block)."""
        import torch
        if self.layout is not None and self.layout[0] is cu_seqlens:
            return self.layout
        n = np.diff(np.asarray(cu_seqlens.tolist(), dtype=np.int64))
        L = int(n.max())
        dst = np.concatenate([j * L + np.arange(k) for j, k in enumerate(n)])
        dev = cu_seqlens.device
        mask = torch.arange(L, device=dev)[None, :] < torch.from_numpy(n).to(dev)[:, None]
        self.layout = (cu_seqlens, torch.from_numpy(dst).to(dev), mask[:, None, None, :], len(n), L)
        return self.layout

    def attention(self, mod, orig):
        import torch

        def forward(hidden_states, cu_seqlens=None, rotary_pos_emb=None, position_embeddings=None, **kw):
            if not self.attn_on:
                return orig(hidden_states, cu_seqlens=cu_seqlens, rotary_pos_emb=rotary_pos_emb,
                            position_embeddings=position_embeddings, **kw)
            _, dst, mask, B, L = self.packing(cu_seqlens)
            seq = hidden_states.shape[0]
            q, k, v = mod.qkv(hidden_states).reshape(seq, 3, mod.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            cos, sin = position_embeddings
            q, k = self.rope(q, k, cos, sin)

            def pad(x):                                    # [seq, H, d] -> [B, H, L, d], zeros past each image
                p = x.new_zeros((B * L,) + tuple(x.shape[1:])).index_copy(0, dst, x)
                return p.view(B, L, x.shape[1], x.shape[2]).transpose(1, 2)
            o = torch.nn.functional.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask,
                                                                 dropout_p=0.0, is_causal=False, scale=mod.scaling)
            o = o.transpose(1, 2).reshape(B * L, -1)[dst]  # [seq, H * d], heads side by side as the library's
            return mod.proj(o)
        return forward

# ---------------------------------------------------------------------------------------------
# GPU run


def run_train(out, steps=None, seed=SEED, init=None, seconds=TRAIN_SECONDS, lr=LR, warmup=WARMUP, first_scene=0,
              eval_seconds=110, autocast=True, batch_scenes=BATCH_SCENES, pixels=None, max_steps=MAX_STEPS,
              grounding=1, questions=N_QUESTIONS, ground_tokens=0):
    t0 = time.time()
    cap = steps or max_steps
    why = demo_seeds.guard(first_scene, cap * batch_scenes)      # main() asked already; callers from elsewhere too
    if why:
        raise SystemExit(f"train_demo.py: refused by tools/demo_seeds.py: {why}")
    if pixels is not None:
        set_pixels(pixels)
    import torch
    import tokenizers
    import transformers
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    log = lambda *a: print(f"[{time.time() - t0:7.1f}s]", *a, flush=True)  # noqa: E731
    log("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(),
        "cpus", os.cpu_count())
    dev = "cuda"
    mdir = os.path.join(out, "demo")
    sp = write_tokenizer(mdir)
    tok_path = os.path.join(mdir, "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_path)
    PAD, IMG, IM_END = sp["<|endoftext|>"], sp["<|image_pad|>"], sp["<|im_end|>"]
    log("tokenizer:", tok.get_vocab_size(), "tokens; caption ids",
        tok.encode(D.caption(D.make_scene(1)), add_special_tokens=False).ids)
    g_prompt, g_answer = D.grounding(D.make_scene(1), np.random.default_rng(0))
    g_ids = tok.encode(g_answer, add_special_tokens=False).ids
    log(f"grounding {g_prompt!r}: {len(g_ids)} answer ids {g_ids}; decodes back: {tok.decode(g_ids) == g_answer}")
    keep_tok = None
    if init and os.path.exists(os.path.join(init, "tokenizer.json")):
        theirs = json.load(open(os.path.join(init, "tokenizer.json")))
        same = theirs["model"] == json.load(open(tok_path))["model"]
        log(f"tokenizer equals {init}'s: {same}")
        if not same:             # the weights go with --init's tokenizer: keep it (same special ids: checked)
            assert {t["content"]: t["id"] for t in theirs["added_tokens"]} == sp, "special ids differ from --init's"
            with open(tok_path, "w") as f:
                json.dump(theirs, f, ensure_ascii=False, indent=1)
            tok, keep_tok = tokenizers.Tokenizer.from_file(tok_path), theirs
            log(f"using {init}'s tokenizer.json")
    log(f"scenes {first_scene}-{first_scene + cap * batch_scenes - 1} at most ({cap} steps of {batch_scenes}), "
        f"allowed by tools/demo_seeds.py; a scene: caption, analysis, {questions} questions, {grounding} grounding "
        + (f"(weight: answer tokens / {ground_tokens}, 1-{GROUND_WEIGHT_MAX})" if ground_tokens else "(weight 1)"))

    # --- check: the training preprocessing equals the HF processor's (kept and resized sizes)
    ip = hf_image_processor()
    log(f"image processor: min_pixels {MIN_PIXELS}, max_pixels {MAX_PIXELS}")
    pre_ok = True
    for i in range(16):
        rgb = D.render(D.make_scene(i))
        o = ip(images=[torch.from_numpy(rgb).permute(2, 0, 1).contiguous()], return_tensors="pt")
        u8, (gh, gw) = u8_patches(rgb, ip, MIN_PIXELS)
        mine = pixel_values_of(u8)
        same = o["image_grid_thw"][0].tolist() == [1, gh, gw] and mine.shape == o["pixel_values"].shape and \
            float((mine - o["pixel_values"]).abs().max()) == 0.0
        pre_ok &= same
        if not same:
            log(f"preprocessing differs on scene {i} ({rgb.shape}): grid {o['image_grid_thw'].tolist()} vs {gh, gw}")
    log("training preprocessing equals Qwen2VLImageProcessor:", pre_ok)

    # --- data workers first (forked before CUDA is used)
    n_workers = max(2, min(14, (os.cpu_count() or 4) - 2))
    total_scenes = cap * batch_scenes                   # the dataset ends where the guard's range does
    dl = torch.utils.data.DataLoader(TrainSet(tok_path, sp, total_scenes, first_scene, MIN_PIXELS, grounding,
                                              questions, ground_tokens),
                                     batch_size=batch_scenes, shuffle=False,
                                     num_workers=n_workers, collate_fn=Collate(PAD), prefetch_factor=6,
                                     persistent_workers=False, pin_memory=True)
    it = iter(dl)

    # --- the model (QWEN3VL.md §11)
    torch.manual_seed(seed)
    t = TEXT
    text_cfg = dict(vocab_size=VOCAB_SIZE, hidden_size=t["hidden_size"], intermediate_size=t["intermediate_size"],
                    num_hidden_layers=t["num_hidden_layers"], num_attention_heads=t["num_attention_heads"],
                    num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"], hidden_act="silu",
                    max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    bos_token_id=PAD, eos_token_id=IM_END, pad_token_id=PAD, attention_bias=False,
                    rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"],
                                     "mrope_section": t["mrope_section"], "mrope_interleaved": True})
    v = VISION
    vis_cfg = dict(depth=v["depth"], hidden_size=v["hidden_size"], hidden_act="gelu_pytorch_tanh",
                   intermediate_size=v["intermediate_size"], num_heads=v["num_heads"], in_channels=3, patch_size=16,
                   spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=t["hidden_size"],
                   num_position_embeddings=v["num_position_embeddings"],
                   deepstack_visual_indexes=v["deepstack_visual_indexes"])
    cfg = Qwen3VLConfig(text_config=text_cfg, vision_config=vis_cfg, image_token_id=IMG,
                        video_token_id=sp["<|video_pad|>"], vision_start_token_id=sp["<|vision_start|>"],
                        vision_end_token_id=sp["<|vision_end|>"], tie_word_embeddings=True)
    if init:          # go on from a saved model (same shapes and tokenizer: checked)
        model = Qwen3VLForConditionalGeneration.from_pretrained(init, dtype=torch.float32).to(dev).train()
        for k in ("hidden_size", "num_hidden_layers", "vocab_size"):
            assert getattr(model.config.text_config, k) == getattr(cfg.text_config, k), k
        assert model.config.image_token_id == IMG
        log(f"model: initialised from {init}")
    else:
        model = Qwen3VLForConditionalGeneration(cfg).to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.98), eps=1e-8, fused=True)

    dedup = DedupVision(model.model.visual)
    dedup.install()
    try:
        fast = FastVision(model.model.visual)
        fast.install()
        log(f"visattn: installed ({fast.describe()})")
    except Exception as e:  # noqa
        log(f"visattn: not installed ({e!r})")
        fast = None
    use = {"dedup": False, "pos": False, "visattn": False}

    def batch_to_inputs(batch):
        u8, grids, per, ids, att, lab, pos = batch
        u8 = u8.to(dev, non_blocking=True)
        rows, g_all, off = [], [], 0
        for (gh, gw), k in zip(grids.tolist(), per.tolist()):
            rows += [np.arange(off, off + gh * gw)] * k      # each scene's patches once per conversation
            off += gh * gw
            g_all += [[1, gh, gw]] * k
        # the patches normalised once, then repeated row-wise: the same values as normalising each copy
        pv = pixel_values_of(u8)[torch.from_numpy(np.concatenate(rows)).to(dev, non_blocking=True)]
        dedup.plan = (per.tolist(), [tuple(g) for g in grids.tolist()]) if use["dedup"] else None
        if fast is not None:
            fast.attn_on = bool(use["visattn"])
        ids = ids.to(dev, non_blocking=True)
        kw = dict(input_ids=ids, attention_mask=att.to(dev, non_blocking=True), pixel_values=pv,
                  image_grid_thw=torch.tensor(g_all, device=dev), mm_token_type_ids=(ids == IMG).long())
        if use["pos"] == "pos4":
            kw["position_ids"] = pos.to(dev, non_blocking=True)
        elif use["pos"] == "pos3":
            kw["position_ids"] = pos[1:].to(dev, non_blocking=True)
        return kw, lab.to(dev, non_blocking=True)

    def loss_of(inputs, lab):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(**inputs).logits
        lg = logits[:, :-1].float()
        tgt = inputs["input_ids"][:, 1:]
        m = lab[:, 1:].float()                    # loss weights of the answer tokens, 0 elsewhere
        ce = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1),
                                               reduction="none").view_as(m)
        # each conversation: the mean over its answer tokens, times its weight (1 but grounding's, TrainSet.weight)
        return ((ce * m).sum(1) / (m > 0).sum(1).clamp(min=1)).mean(), logits

    # --- the speed-ups must not change what the model computes: one batch several ways, fp32, no grad,
    # compared on the real (not padded) tokens, whose logits are all that the loss reads
    first = next(it)
    with torch.no_grad():
        # fp32 throughout, the patch-embedding convolution too: with cuDNN's TF32 on, the two batch
        # shapes may get different convolution algorithms, and the check would compare TF32 noise
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        res = {}
        for name, d_, p_, va in (("plain", False, None, 0), ("dedup", True, None, 0),
                                 ("pos4", False, "pos4", 0), ("pos3", False, "pos3", 0),
                                 ("dedup+pos4", True, "pos4", 0), ("dedup+pos3", True, "pos3", 0),
                                 ("dedup+pos3+visattn", True, "pos3", 1)):
            use["dedup"], use["pos"], use["visattn"] = d_, p_, va
            if va and fast is None:
                continue
            try:
                kw, lb = batch_to_inputs(first)
                res[name] = model(**kw).logits.float()
            except Exception as e:  # noqa
                log(f"{name}: failed {e!r}")
        base, ok = res["plain"], {}
        real = first[4].to(dev).bool()
        for name in ("dedup", "pos4", "pos3", "dedup+pos4", "dedup+pos3", "dedup+pos3+visattn"):
            if name not in res:
                ok[name] = False
                continue
            dr = float((res[name] - base)[real].abs().max())
            dp = float((res[name] - base)[~real].abs().max()) if bool((~real).any()) else 0.0
            log(f"check {name} vs plain: max |logit diff| {dr:.3g} on real tokens ({dp:.3g} on padding)")
            ok[name] = dr < 1e-3
        use["dedup"] = ok["dedup"]
        use["pos"] = None
        for pn in ("pos3", "pos4"):
            if ok[pn] and (ok["dedup+" + pn] or not ok["dedup"]):
                use["pos"] = pn
                break
        del res, base
    # the vision attention in one call (FastVision): the forward check above, then the gradients, with
    # grad enabled, against the plain model's, on the same batch (no optimizer step)
    use["visattn"] = False
    if ok.get("dedup+pos3+visattn") and use["dedup"] and use["pos"] == "pos3":
        grads = {}
        for name, cfg in (("plain", (False, None, 0)), ("fast", (True, "pos3", 1))):
            use["dedup"], use["pos"], use["visattn"] = cfg
            try:
                model.zero_grad(set_to_none=True)
                kw, lb = batch_to_inputs(first)
                loss_of(kw, lb)[0].backward()
                grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            except Exception as e:  # noqa
                log(f"gradient check {name}: failed {e!r}")
        model.zero_grad(set_to_none=True)
        use["dedup"], use["pos"], use["visattn"] = True, "pos3", False
        if len(grads) == 2 and grads["plain"].shape == grads["fast"].shape:
            rel = float((grads["fast"] - grads["plain"]).norm() / grads["plain"].norm().clamp(min=1e-30))
            log(f"check gradients dedup+pos3+visattn vs plain: relative difference {rel:.3g}")
            use["visattn"] = rel < 1e-4
        del grads
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    log(f"training with dedup={use['dedup']} pos={use['pos']} visattn={use['visattn']}")
    info_speed = dict(use)

    def lr_at(step, total):
        if step < warmup:
            return lr * (step + 1) / warmup
        q = min(1.0, (step - warmup) / max(1, total - warmup))
        return lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * q)))

    total = cap
    losses, step, t_train0, t_mark = [], 0, time.time(), None
    run_loss, run_n = 0.0, 0
    wait_data, skipped, wait_all, t_win, w_win = 0.0, 0, 0.0, time.time(), 0.0
    while step < total:
        tw = time.time()
        batch = first if step == 0 else next(it)
        dw = time.time() - tw
        wait_all += dw
        w_win += dw
        if 20 <= step < 40:
            wait_data += dw
        inputs, lab = batch_to_inputs(batch)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total)
        loss, _ = loss_of(inputs, lab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        step += 1
        lv = float(loss.detach())
        if math.isfinite(lv) and math.isfinite(float(gnorm)):
            opt.step()
            run_loss += lv
            run_n += 1
        else:
            skipped += 1          # a non-finite loss or gradient: this batch leaves the weights alone
            if skipped > 50:
                log(f"training: {skipped} non-finite steps by step {step}; stopping with the last finite weights")
                break
        if step == 20:
            t_mark = time.time()
        if step == 40 and steps is None:
            per_step = (time.time() - t_mark) / 20
            left = seconds - (time.time() - t_train0)
            total = int(min(cap, step + left / per_step))
            log(f"{per_step * 1000:.1f} ms/step (waiting for data {wait_data / 20 * 1000:.1f} ms) -> {total} steps in {seconds} s")
        if step % 50 == 0 or step == total:
            losses.append([step, round(run_loss / max(1, run_n), 4), round(time.time() - t_train0, 1)])
            n_win = step % 50 or 50
            log(f"step {step}/{total} loss {run_loss / max(1, run_n):.4f} lr {lr_at(step - 1, total):.2e}"
                f" {(time.time() - t_win) / n_win * 1000:.1f} ms/step, waiting for data {w_win / n_win * 1000:.1f}"
                f"{f' ({skipped} non-finite steps skipped so far)' if skipped else ''}")
            run_loss, run_n, t_win, w_win = 0.0, 0, time.time(), 0.0
        if steps is None and time.time() - t_train0 > seconds + 20:
            log(f"training: over the time budget at step {step}, stopping")
            break
    dedup.plan = None
    if fast is not None:
        fast.attn_on = False
    train_time = time.time() - t_train0
    log(f"training: {train_time / max(1, step) * 1000:.1f} ms/step on average, waiting for data "
        f"{wait_all / max(1, step) * 1000:.1f} ms/step")
    del it, dl
    model.eval()
    model = model.to(torch.bfloat16)
    model.generation_config.do_sample = False
    for k in ("temperature", "top_p", "top_k"):
        setattr(model.generation_config, k, None)
    model.generation_config.eos_token_id = [IM_END, PAD]
    model.generation_config.pad_token_id = PAD
    model.save_pretrained(mdir)
    write_tokenizer(mdir)            # overwrite generation_config.json with ours; same tokenizer files
    if keep_tok is not None:
        with open(tok_path, "w") as f:
            json.dump(keep_tok, f, ensure_ascii=False, indent=1)
    log(f"saved {mdir}: {sorted(os.listdir(mdir))}, {train_time:.0f} s of training, {step} steps")
    del model, opt
    torch.cuda.empty_cache()

    info = dict(torch=torch.__version__, transformers=transformers.__version__, device=torch.cuda.get_device_name(),
                seed=seed, steps=step, batch_scenes=batch_scenes, conversations_per_scene=2 + questions + grounding,
                grounding=grounding, questions=questions, ground_tokens=ground_tokens,
                ground_weight_max=GROUND_WEIGHT_MAX, max_steps=cap,
                autocast_bf16=autocast, skipped_steps=skipped,
                train_seconds=round(train_time, 1), ms_per_step=round(train_time / max(1, step) * 1000, 1),
                data_wait_ms_per_step=round(wait_all / max(1, step) * 1000, 1), lr=lr, warmup=warmup, init=init, first_scene=first_scene, weight_decay=WD, losses=losses,
                n_params=n_params, preprocessing_equals_hf=pre_ok, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, speedups=info_speed, text=TEXT, vision=VISION,
                vocab_size=VOCAB_SIZE, bpe_tokens=tok.get_vocab_size() - len(T.SPECIALS))
    evaluate(out, mdir, tok, sp, ip, info, t0, log, time.time() + eval_seconds)


def evaluate(out, mdir, tok, sp, ip, info, t0, log, deadline):
    import torch
    from torchvision.io import decode_image, ImageReadMode
    from transformers import Qwen3VLForConditionalGeneration
    PAD, IMG, IM_END = sp["<|endoftext|>"], sp["<|image_pad|>"], sp["<|im_end|>"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_grad_enabled(False)
    dev = "cuda"
    # transformers' fp32 model on the saved bf16 weights (what iris computes on the CPU)
    model = Qwen3VLForConditionalGeneration.from_pretrained(mdir, dtype=torch.float32).to(dev).eval()
    edir = os.path.join(out, "eval")
    scenes, items = eval_set(edir, EVAL_SEED0, N_EVAL, info.get("grounding", True))
    fdir = os.path.join(out, "fixture")
    f_scenes, f_items = eval_set(fdir, FIXTURE_SEED0, N_FIXTURE, info.get("grounding", True))
    log(f"eval: {N_EVAL} scenes from {EVAL_SEED0}, {len(items)} items; fixture: {N_FIXTURE} scenes from "
        f"{FIXTURE_SEED0}")
    pix = {}
    where = {**{k: edir for k in scenes}, **{k: fdir for k in f_scenes}}

    def pixels(name):
        if name not in pix:
            o = ip(images=[decode_image(os.path.join(where[name], "images", name), mode=ImageReadMode.RGB)],
                   return_tensors="pt")
            pix[name] = (o["pixel_values"], o["image_grid_thw"][0])
        return pix[name]

    def inputs_for(batch):
        ids, pvs, grids = [], [], []
        for it_ in batch:
            pv, g = pixels(it_["image"])
            ids.append(chat_ids(tok, sp, int(g.prod()) // 4, it_["prompt"]))
            pvs.append(pv)
            grids.append(g)
        L = max(len(x) for x in ids)
        t_ids = torch.full((len(ids), L), PAD, dtype=torch.long)
        t_att = torch.zeros((len(ids), L), dtype=torch.long)
        for k, x in enumerate(ids):                       # left padding
            t_ids[k, L - len(x):] = torch.tensor(x)
            t_att[k, L - len(x):] = 1
        t_ids = t_ids.to(dev)
        return dict(input_ids=t_ids, attention_mask=t_att.to(dev), pixel_values=torch.cat(pvs).to(dev),
                    image_grid_thw=torch.stack(grids).to(dev), mm_token_type_ids=(t_ids == IMG).long()), L

    def generate(batch, max_new):
        kw, L = inputs_for(batch)
        g = model.generate(**kw, do_sample=False, max_new_tokens=max_new, eos_token_id=[IM_END, PAD],
                           pad_token_id=PAD)
        res = []
        for row in g[:, L:].tolist():
            toks = []
            for x in row:
                if x in (IM_END, PAD):
                    break
                toks.append(x)
            res.append((toks, tok.decode(toks, skip_special_tokens=False)))
        return res

    def write_eval(done_items):
        recs = []
        for it_ in done_items:
            it_["metrics"] = D.score(it_["task"], scenes[it_["image"]], it_["truth"], it_["output"], it_["prompt"])
            recs += records_of(it_, it_["metrics"])
        info["accuracy_transformers"] = D.summarize(recs)
        info["n_eval_scenes"] = len({x["image"] for x in done_items})
        with open(os.path.join(edir, "eval.json"), "w") as f:
            json.dump(dict(info=info, scenes=scenes, items=done_items), f, indent=1)

    # --- the evaluation's scenes, batched (left padding), grouped by task
    done = []
    for task in ("vqa", "caption", "analysis", "grounding"):
        group = [x for x in items if x["task"] == task]
        bs = 250
        for s in range(0, len(group), bs):
            if time.time() > deadline:
                log("eval: out of time, stopping here")
                break
            b = group[s:s + bs]
            try:
                res = generate(b, MAX_NEW[task])
            except Exception as e:  # noqa
                import traceback
                traceback.print_exc()
                log(f"batched generate failed ({e!r}); batch-1 for this batch")
                res = [generate([x], MAX_NEW[task])[0] for x in b]
            for x, (toks, text) in zip(b, res):
                x["output"], x["tokens"] = text, toks
                done.append(x)
        write_eval(done)
        log(f"eval {task}: {json.dumps(info['accuracy_transformers'])}")
    info["eval_batched"] = True

    # --- the fixture: its own scenes (tools/demo_seeds.py), batch 1 (no padding): caption, first
    # question, analysis and the "every object" grounding item of each
    fx = []
    by_img = {}
    for x in f_items:
        by_img.setdefault(x["image"], []).append(x)
    for name in sorted(by_img):
        if time.time() > deadline + 25:
            log("fixture: out of time, stopping here")
            break
        mine = by_img[name]
        pick = [y for y in mine if y["task"] in ("caption", "analysis")] + [y for y in mine if y["task"] == "vqa"][:1]
        pick += [y for y in mine if y["task"] == "grounding"][:1]
        for x in pick:
            toks, text = generate([x], MAX_NEW[x["task"]])[0]
            fx.append(dict(image=name, seed=f_scenes[name]["seed"], task=x["task"], prompt=x["prompt"],
                           truth=x["truth"], tokens=toks, text=text))
    info["fixture_items"] = len(fx)
    with open(os.path.join(fdir, "greedy.json"), "w") as f:
        json.dump(dict(model="models/demo", transformers=info["transformers"], torch=info["torch"],
                       precision="fp32 on the bf16 weights, TF32 off, batch 1, greedy", items=fx), f, indent=1)
    write_eval(done)
    log(f"fixture: {len(fx)} items; done")

# ---------------------------------------------------------------------------------------------
# the evaluation's scenes and items (transformers there, iris here)


def eval_set(d, first, n, grounding=True):
    """Scenes first .. first + n - 1 (tools/demo_seeds.py: outside every training range) rendered
    into d/images/SEED.png; returns ({image: scene}, [items]) of demo_data.eval_items."""
    os.makedirs(os.path.join(d, "images"), exist_ok=True)
    scenes, items = {}, []
    for seed in range(first, first + n):
        sc = D.make_scene(seed)
        name = f"{seed}.png"
        D.write_png(os.path.join(d, "images", name), D.render(sc))
        scenes[name] = sc
        items += D.eval_items(sc, name, grounding)
    return scenes, items


def records_of(item, metrics):
    """Summary records of one scored item: its task (vqa and grounding by kind too)."""
    if item["task"] in ("vqa", "grounding"):
        return [dict(task=item["task"] + ":" + item["type"], metrics=metrics), dict(task=item["task"], metrics=metrics)]
    return [dict(task=item["task"], metrics=metrics)]


def hf_eval(mdir, out, eval_seconds):
    """(GPU machine) transformers' greedy evaluation of a saved model, as train's, e.g. the shipped one."""
    import torch
    import tokenizers
    import transformers
    t0 = time.time()
    log = lambda *a: print(f"[{time.time() - t0:7.1f}s]", *a, flush=True)  # noqa: E731
    pp = json.load(open(os.path.join(mdir, "preprocessor_config.json")))["size"]
    set_pixels(pp["shortest_edge"])
    tj = json.load(open(os.path.join(mdir, "tokenizer.json")))
    sp = {t["content"]: t["id"] for t in tj["added_tokens"]}
    tok = tokenizers.Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    info = dict(torch=torch.__version__, transformers=transformers.__version__, device=torch.cuda.get_device_name(),
                model=mdir, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, grounding=True)
    log(f"hf-eval {mdir} at {MIN_PIXELS} px")
    evaluate(out, mdir, tok, sp, hf_image_processor(), info, t0, log, time.time() + eval_seconds)


def make_eval(edir, n, grounding=True):
    scenes, items = eval_set(edir, EVAL_SEED0, n, grounding)
    with open(os.path.join(edir, "eval.json"), "w") as f:
        json.dump(dict(info=dict(first_seed=EVAL_SEED0, n_eval_scenes=n), scenes=scenes, items=items), f, indent=1)
    print(f"{edir}: {n} scenes from seed {EVAL_SEED0}, {len(items)} items")


def iris_eval(edir, model, limit=None, binary="build/demo/bench/demo_eval"):
    ev = json.load(open(os.path.join(edir, "eval.json")))
    items, scenes = ev["items"], ev["scenes"]
    names = sorted({x["image"] for x in items})
    if limit:
        names = set(names[:limit])
        items = [x for x in items if x["image"] in names]
    tsv = os.path.join(edir, "iris_items.tsv")
    with open(tsv, "w") as f:
        for x in items:
            f.write(os.path.join(edir, "images", x["image"]) + "\t" + x["prompt"] + "\t" +
                    str(MAX_NEW[x["task"]]) + "\n")
    t = time.time()
    out = subprocess.run([binary, model, tsv], check=True, capture_output=True, text=True).stdout
    secs = time.time() - t
    res = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(res) == len(items), (len(res), len(items))
    gc = json.load(open(os.path.join(model, "generation_config.json")))
    eos = set(gc["eos_token_id"] if isinstance(gc["eos_token_id"], list) else [gc["eos_token_id"]])
    recs, agree, n_hf = [], 0, 0
    for x, r in zip(items, res):
        while r["tokens"] and r["tokens"][-1] in eos:
            r["tokens"].pop()
        m = D.score(x["task"], scenes[x["image"]], x["truth"], r["text"], x["prompt"])
        recs += records_of(x, m)
        x["iris"], x["iris_metrics"] = r["text"], m
        if "tokens" in x:
            n_hf += 1
            agree += int(r["tokens"] == x["tokens"])
    summary = dict(n_scenes=len({x["image"] for x in items}), n_items=len(items), seconds=round(secs, 1),
                   seeds=[min(scenes[x["image"]]["seed"] for x in items), max(scenes[x["image"]]["seed"] for x in items)],
                   accuracy_iris=D.summarize(recs),
                   agreement_with_transformers=round(agree / n_hf, 4) if n_hf else None, agree=agree,
                   compared=n_hf)
    with open(os.path.join(edir, "iris_eval.json"), "w") as f:
        json.dump(dict(summary=summary, items=items), f, indent=1)
    print(json.dumps(summary, indent=1))
    print("disagreements:")
    for x in items:
        if x.get("iris") is not None and "output" in x and x["iris"] != x["output"]:
            print(f"  {x['image']} {x['prompt'][:40]!r}: hf={x['output']!r} iris={x['iris']!r}")


def main():
    a = sys.argv[1:]

    def opt(name, default=None):
        return a[a.index(name) + 1] if name in a else default
    if len(a) >= 2 and a[0] == "tokenizer":
        write_tokenizer(a[1])
    elif len(a) >= 2 and a[0] == "train":
        s = opt("--steps")
        run_train(a[1], int(s) if s else None, int(opt("--seed", SEED)), init=opt("--init"),
                  seconds=float(opt("--seconds", TRAIN_SECONDS)), lr=float(opt("--lr", LR)),
                  warmup=int(opt("--warmup", WARMUP)), first_scene=int(opt("--first-scene", 0)),
                  eval_seconds=float(opt("--eval-seconds", 110)), autocast=opt("--autocast", "1") != "0",
                  batch_scenes=int(opt("--batch-scenes", BATCH_SCENES)),
                  pixels=int(opt("--pixels")) if opt("--pixels") else None, max_steps=seed_guard(a)[0],
                  grounding=int(opt("--grounding", 1)), questions=int(opt("--questions", N_QUESTIONS)),
                  ground_tokens=float(opt("--ground-tokens", 0)))
    elif len(a) >= 3 and a[0] == "hf-eval":
        hf_eval(a[1], a[2], float(opt("--eval-seconds", 60)))
    elif len(a) >= 2 and a[0] == "make-eval":
        make_eval(a[1], int(opt("--n", N_EVAL)), opt("--grounding", "1") != "0")
    elif len(a) >= 3 and a[0] == "iris-eval":
        lim = opt("--limit")
        iris_eval(a[1], a[2], int(lim) if lim else None, opt("--bin", "build/demo/bench/demo_eval"))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
