#!/usr/bin/env python3
"""ref_int4.py: 4-bit (W4A16) fixtures: compressed-tensors pack-quantized checkpoints of the tiny
model and transformers' logits on the same weights dequantized by hand.

Two stages:
  python3 tools/ref_int4.py make            (here; plain Python, no numpy or torch)
      quantizes the decoder linears of tests/fixtures/tiny/tiny-gqa/model (BF16) round-to-nearest
      into tests/fixtures/tiny/<variant>/model: the format llm-compressor writes ("pack-quantized":
      weight_packed int32 [out, in/8], weight_scale BF16 [out, in/group], weight_zero_point int32
      [out/8, in/group] when asymmetric, weight_shape int64 [2]) with its quantization_config.
  python3 tools/ref_int4.py ref OUTDIR      (GPU machine: torch, transformers 5.17, no network)
      reads those checkpoints from the repository (or makes them into OUTDIR first when absent),
      dequantizes every linear by hand, w = bf16((q - zero) * scale) per group as compressed-tensors'
      dequantize does (in the scale's dtype), loads the tiny-gqa model in float32 (CPU, eager) with
      those weights, and records, for the "text" and "image" conversations of the tiny fixtures
      (tests/fixtures/tiny/inputs/), logits.npy [T, V] and 24 greedy tokens (full recompute).
      Writes OUTDIR/<variant>.tar (<variant>/<scenario>/logits.npy, greedy.npy) and
      OUTDIR/manifest_int4.json; everything it does is printed.

Packing, from compressed-tensors' pack_to_int32 (compressors/pack_quantized/helpers.py): each
value q in [-8, 7] is stored as q + 8; element i of a row lies in bits 4*(i % 8) of word i // 8
(the lowest nibble first).  Zero points are packed the same way along the output dimension
(packed_dim=0): word [r // 8][g] holds the zero points of rows r..r+7 of group g.
Quantization (calculate_qparams): symmetric scale = max|w| / 7.5, q = clamp(round(w / s), -8, 7);
asymmetric with min' = min(min, 0), max' = max(max, 0): s = (max' - min') / 15,
z = clamp(round(-8 - min' / s), -8, 7), q = clamp(round(w / s + z), -8, 7); rounding half to even.
"""
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tarfile
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "tiny")
SRC = os.path.join(FIX, "tiny-gqa", "model")
VARIANTS = {  # name: (group_size, symmetric)
    "tiny-int4-sym": (32, True),
    "tiny-int4-asym": (32, False),
    "tiny-int4-g64": (64, False),
}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SCENARIOS = ("text", "image")
N_GREEDY = 24
SIDE_FILES = ("chat_template.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
              "tokenizer_config.json")
BF16_EPS = 2.0 ** -7   # torch.finfo(torch.bfloat16).eps: compressed-tensors' scale for all-zero groups


def log(*a):
    print(*a, flush=True)

# ---------------------------------------------------------------------------------------------
# safetensors in plain Python


def st_read(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], buf[8 + n + a:8 + n + b])
    return out, meta


def st_write(path, tensors, meta=None):
    hdr, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, data = tensors[k]
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    if meta:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_to_float(u):
    return struct.unpack("<f", struct.pack("<I", u << 16))[0]


def float_to_bf16(x):
    """Round to nearest even, through float32 (finite values only)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF

# ---------------------------------------------------------------------------------------------
# quantize and pack (the make stage)


def quantize_rows(w, rows, cols, gs, sym):
    """w: floats row-major [rows, cols].  Returns q (ints, [rows*cols]), scale bf16 bits and
    zero points (ints), both [rows * n_groups]."""
    ng = (cols + gs - 1) // gs
    q, sc, zp = [0] * (rows * cols), [0] * (rows * ng), [0] * (rows * ng)
    for r in range(rows):
        for g in range(ng):
            seg = w[r * cols + g * gs:r * cols + min(cols, (g + 1) * gs)]
            lo, hi = min(min(seg), 0.0), max(max(seg), 0.0)
            if sym:
                s = max(-lo, hi) / 7.5
                z = 0
            else:
                s = (hi - lo) / 15.0
            sb = float_to_bf16(s) if s != 0 else float_to_bf16(BF16_EPS)
            s = bf16_to_float(sb)
            if not sym:
                z = min(7, max(-8, round(-8 - lo / s)))
            sc[r * ng + g], zp[r * ng + g] = sb, z
            for i, x in enumerate(seg):
                q[r * cols + g * gs + i] = min(7, max(-8, round(x / s + z)))
    return q, sc, zp


def pack_rows(vals, rows, cols):
    """compressed-tensors pack_to_int32, num_bits 4, packed_dim 1: [rows, ceil(cols/8)] words."""
    nw = (cols + 7) // 8
    out = bytearray()
    for r in range(rows):
        for wi in range(nw):
            word = 0
            for j in range(8):
                c = wi * 8 + j
                v = vals[r * cols + c] + 8 if c < cols else 0
                word |= (v & 0xF) << (4 * j)
            out += struct.pack("<I", word)
    return bytes(out)


def pack_cols(vals, rows, cols):
    """pack_to_int32 with packed_dim 0: [ceil(rows/8), cols] words."""
    t = [vals[r * cols + c] for c in range(cols) for r in range(rows)]   # transpose to [cols, rows]
    packed = pack_rows(t, cols, rows)                                     # [cols, ceil(rows/8)]
    nw = (rows + 7) // 8
    words = struct.unpack("<%dI" % (cols * nw), packed)
    return struct.pack("<%dI" % (cols * nw), *[words[c * nw + wi] for wi in range(nw) for c in range(cols)])


def qconfig(gs, sym):
    return {
        "config_groups": {"group_0": {
            "format": "pack-quantized", "input_activations": None, "output_activations": None,
            "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": gs,
                        "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                        "symmetric": sym, "type": "int"}}},
        "format": "pack-quantized", "global_compression_ratio": None, "ignore": ["lm_head", "re:.*visual.*"],
        "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed",
        "sparsity_config": {}, "transform_config": {}, "version": "0.12.2",
    }


def is_linear(name):
    return name.startswith("model.language_model.layers.") and name.endswith(".weight") and \
        any("." + l + "." in name for l in LINEARS)


def make_variant(name, gs, sym, out_dir):
    src, meta = st_read(os.path.join(SRC, "model.safetensors"))
    dst, n = {}, 0
    for k, (dt, shape, data) in src.items():
        if not is_linear(k):
            dst[k] = (dt, shape, data)
            continue
        assert dt == "BF16" and len(shape) == 2, k
        rows, cols = shape
        assert cols % gs == 0 and rows % 8 == 0, (k, shape, gs)
        w = [bf16_to_float(u) for u in struct.unpack("<%dH" % (rows * cols), data)]
        q, sc, zp = quantize_rows(w, rows, cols, gs, sym)
        p = k[:-len(".weight")]
        ng = cols // gs
        dst[p + ".weight_packed"] = ("I32", [rows, (cols + 7) // 8], pack_rows(q, rows, cols))
        dst[p + ".weight_scale"] = ("BF16", [rows, ng], struct.pack("<%dH" % len(sc), *sc))
        dst[p + ".weight_shape"] = ("I64", [2], struct.pack("<2q", rows, cols))
        if not sym:
            dst[p + ".weight_zero_point"] = ("I32", [(rows + 7) // 8, ng], pack_cols(zp, rows, ng))
        n += 1
    os.makedirs(out_dir, exist_ok=True)
    st_write(os.path.join(out_dir, "model.safetensors"), dst, meta)
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    cfg["quantization_config"] = qconfig(gs, sym)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in SIDE_FILES:
        shutil.copy(os.path.join(SRC, fn), os.path.join(out_dir, fn))
    log(f"{name}: {n} linears to int4 (group {gs}, {'symmetric' if sym else 'asymmetric'}) in {out_dir}")


def make(root):
    for name, (gs, sym) in VARIANTS.items():
        make_variant(name, gs, sym, os.path.join(root, name, "model"))

# ---------------------------------------------------------------------------------------------
# the reference (the ref stage)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def ref(out_root):
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import Qwen3VLForConditionalGeneration

    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    os.makedirs(out_root, exist_ok=True)
    log("torch", torch.__version__, "transformers", transformers.__version__)
    try:
        from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32 as ct_unpack
        log("compressed-tensors found: its unpack_from_int32 is checked against ours")
    except Exception:  # noqa: not installed on the GPU machine, most likely
        ct_unpack = None
        log("compressed-tensors not installed: unpacking by our port of unpack_from_int32 only")

    ct_agree = {}

    def unpack(words, cols):
        """[R, W] int32 -> [R, cols] int8 values: element i = nibble i % 8 of word i // 8, minus 8."""
        v = words.to(torch.int64) & 0xFFFFFFFF
        sh = torch.arange(8, dtype=torch.int64) * 4
        nib = (v[:, :, None] >> sh) & 0xF
        return (nib.reshape(v.shape[0], -1)[:, :cols] - 8).to(torch.int8)

    def dequant(sd, p, gs):
        packed, scale = sd[p + ".weight_packed"], sd[p + ".weight_scale"]
        rows, cols = [int(x) for x in sd[p + ".weight_shape"].tolist()]
        q = unpack(packed, cols)
        ng = scale.shape[1]
        zp = None
        if p + ".weight_zero_point" in sd:
            zp = unpack(sd[p + ".weight_zero_point"].t().contiguous(), rows).t().contiguous()  # [rows, ng]
        if ct_unpack is not None:
            try:
                same = torch.equal(ct_unpack(packed, 4, torch.Size([rows, cols])), q)
                if zp is not None:
                    same = same and torch.equal(
                        ct_unpack(sd[p + ".weight_zero_point"], 4, torch.Size([rows, ng]), packed_dim=0), zp)
            except Exception as e:  # noqa: an older compressed-tensors with another signature
                same = repr(e)
            ct_agree[p] = same
            if same is not True:
                log(f"{p}: compressed-tensors' unpack_from_int32 disagrees with ours: {same}")
        # compressed-tensors' dequantize: (q - zp) in the scale's dtype, times the scale (bf16 rounding)
        qf = q.to(scale.dtype)
        if zp is not None:
            qf = qf - zp.to(scale.dtype).repeat_interleave(gs, 1)[:, :cols]
        w = (qf * scale.repeat_interleave(gs, 1)[:, :cols]).float()
        # the same by fp32 arithmetic then one rounding (what iris does): must be identical
        qi = q.to(torch.float32) - (zp.float().repeat_interleave(gs, 1)[:, :cols] if zp is not None else 0)
        w32 = (qi * scale.float().repeat_interleave(gs, 1)[:, :cols]).to(torch.bfloat16).float()
        assert torch.equal(w, w32), p
        return w

    def load_np(scen, name):
        return np.load(os.path.join(FIX, "inputs", scen, name + ".npy"))

    inputs = {}
    for s in SCENARIOS:
        d = dict(ids=load_np(s, "input_ids"), mm=load_np(s, "mm_token_type_ids"), grid=load_np(s, "image_grid_thw"))
        pv = os.path.join(FIX, "inputs", s, "pixel_values.npy")
        d["pv"] = np.load(pv) if os.path.exists(pv) else None
        inputs[s] = d

    def model_inputs(s, ids=None, mm=None):
        x = inputs[s]
        ids = x["ids"] if ids is None else ids
        mm = x["mm"] if mm is None else mm
        kw = dict(input_ids=torch.tensor(ids[None]), attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                  mm_token_type_ids=torch.tensor(mm[None]))
        if x["pv"] is not None:
            kw["pixel_values"] = torch.tensor(x["pv"], dtype=torch.float32)
            kw["image_grid_thw"] = torch.tensor(x["grid"])
        return kw

    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "compressed_tensors_checked": ct_unpack is not None, "variants": {}}

    # Sanity: the unquantized tiny-gqa reproduces its committed logits (same loading path).
    try:
        base = Qwen3VLForConditionalGeneration.from_pretrained(SRC, dtype=torch.float32,
                                                               attn_implementation="eager").float().eval()
        lo = base(**model_inputs("text")).logits[0].float().numpy()
        old = np.load(os.path.join(FIX, "tiny-gqa", "text", "logits.npy"))
        manifest["tiny_gqa_text_vs_committed_max_abs"] = float(np.abs(lo - old).max())
        log("tiny-gqa text logits vs the committed fixture: max abs", manifest["tiny_gqa_text_vs_committed_max_abs"])
        del base
    except Exception:  # noqa
        traceback.print_exc()

    for name, (gs, sym) in VARIANTS.items():
        info = {"group_size": gs, "symmetric": sym, "scenarios": {}}
        manifest["variants"][name] = info
        try:
            ckpt = os.path.join(FIX, name, "model")
            if not os.path.exists(os.path.join(ckpt, "model.safetensors")):
                ckpt = os.path.join(tempfile.mkdtemp(), name, "model")
                make_variant(name, gs, sym, ckpt)
            info["checkpoint"] = ckpt
            info["sha256"] = sha256(os.path.join(ckpt, "model.safetensors"))
            sd = load_file(os.path.join(ckpt, "model.safetensors"))
            model = Qwen3VLForConditionalGeneration.from_pretrained(SRC, dtype=torch.float32,
                                                                    attn_implementation="eager").float().eval()
            params = dict(model.named_parameters())
            n, err_vs_bf16 = 0, 0.0
            for k in sorted(sd):
                if not k.endswith(".weight_packed"):
                    continue
                p = k[:-len(".weight_packed")]
                w = dequant(sd, p, gs)
                tgt = params[p + ".weight"]
                assert tgt.shape == w.shape, (p, tgt.shape, w.shape)
                err_vs_bf16 = max(err_vs_bf16, float((tgt.detach() - w).abs().max()))
                tgt.data.copy_(w)
                n += 1
            info["n_linears"] = n
            info["dequant_vs_bf16_max_abs"] = err_vs_bf16
            log(f"[{name}] {n} linears dequantized; max |w_int4 - w_bf16| {err_vs_bf16:.4f}")
            assert n == 3 * len(LINEARS), n
        except Exception:  # noqa
            traceback.print_exc()
            info["error"] = traceback.format_exc()
            continue
        tar_dir = os.path.join(out_root, "stage", name)
        for s in SCENARIOS:
            try:
                d = os.path.join(tar_dir, s)
                os.makedirs(d, exist_ok=True)
                logits = model(**model_inputs(s)).logits[0].float().numpy()
                np.save(os.path.join(d, "logits.npy"), np.ascontiguousarray(logits.astype(np.float32)))
                ids, mm = inputs[s]["ids"].copy(), inputs[s]["mm"].copy()
                toks, margins = [], []
                for _ in range(N_GREEDY):
                    lo = model(**model_inputs(s, ids, mm)).logits[0, -1].float()
                    top = torch.topk(lo, 2)
                    toks.append(int(top.indices[0]))
                    margins.append(float(top.values[0] - top.values[1]))
                    ids, mm = np.append(ids, toks[-1]), np.append(mm, 0)
                np.save(os.path.join(d, "greedy.npy"), np.array(toks, dtype=np.int64))
                info["scenarios"][s] = dict(n_tokens=int(len(inputs[s]["ids"])), logits_shape=list(logits.shape),
                                            logits_max_abs=float(np.abs(logits).max()), greedy=toks,
                                            greedy_margins=margins, greedy_min_margin=min(margins))
                log(f"[{name}/{s}] T={len(inputs[s]['ids'])} max|logit|={np.abs(logits).max():.3f} greedy={toks} "
                    f"min margin {min(margins):.4f}")
            except Exception:  # noqa
                traceback.print_exc()
                info["scenarios"][s] = {"error": traceback.format_exc()}
        # transformers' own compressed-tensors loader, where the package is installed: for agreement only
        try:
            if ct_unpack is not None:
                hf = Qwen3VLForConditionalGeneration.from_pretrained(
                    info["checkpoint"], dtype=torch.float32, attn_implementation="eager", device_map="cpu").eval()
                lh = hf(**model_inputs("text")).logits[0].float().numpy()
                lo = np.load(os.path.join(tar_dir, "text", "logits.npy"))
                info["hf_compressed_tensors_text_max_abs"] = float(np.abs(lh - lo).max())
                log(f"[{name}] transformers' own int4 load vs by hand (text): max abs "
                    f"{info['hf_compressed_tensors_text_max_abs']}")
                del hf
        except Exception as e:  # noqa
            log(f"[{name}] transformers' own load failed: {e!r}")
        try:
            tp = os.path.join(out_root, name + ".tar")
            with tarfile.open(tp, "w") as t:
                t.add(tar_dir, arcname=name)
            log("wrote", tp, os.path.getsize(tp), "bytes")
        except Exception:  # noqa
            traceback.print_exc()
        del model
    shutil.rmtree(os.path.join(out_root, "stage"), ignore_errors=True)
    if ct_agree:
        manifest["compressed_tensors_unpack_agrees"] = all(v is True for v in ct_agree.values())
    with open(os.path.join(out_root, "manifest_int4.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log("wrote", os.path.join(out_root, "manifest_int4.json"))
    log("done")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        make(FIX)
    elif len(sys.argv) >= 3 and sys.argv[1] == "ref":
        ref(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
