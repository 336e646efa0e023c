#!/usr/bin/env python3
"""ref_video.py: video parity fixtures for iris (tests/fixtures/video/).

Two stages:
  python3 tools/ref_video.py make        (here: numpy + the ffmpeg command line from Debian)
      generates every clip's frames deterministically (integer arithmetic only, so any numpy
      gives the same bytes), writes each clip with a LOSSLESS codec (FFV1 in Matroska, or
      libx264rgb at qp 0 in MP4 for the H.264 path and the rotation tag), and records in
      tests/fixtures/video/clips.json each clip's fps, frame count, displayed size and the
      SHA-256 of every displayed RGB frame.  iris's decoder must reproduce those hashes.
  python3 tools/ref_video.py ref OUTDIR  (GPU machine: torch, transformers 5.17; no video reader)
      regenerates the same frames (checked against clips.json), hands them to transformers'
      Qwen3VLVideoProcessor as decoded frames with their metadata (fps, total_num_frames),
      which samples them itself (do_sample_frames), and records for every (clip, settings)
      case pixel_values_videos, video_grid_thw and the sampled indices; then, for the tiny
      fixture models (tests/fixtures/tiny/*/model, fp32 on the CPU, eager), the rendered
      prompt with its timestamps, the token ids, mm_token_type_ids, the position ids the
      language model receives, the vision embeddings, the logits and 12 greedy tokens for a
      video prompt, an image + video prompt and a rotated-clip prompt.
      Writes OUTDIR/video_ref.npz (arrays) and OUTDIR/video_ref.json (everything else).
  python3 tools/ref_video.py unpack DIR  (here) writes the tiny-model cases' arrays of
      DIR/video_ref.npz to tests/fixtures/video/ref/*.npy and copies video_ref.json beside them
      (the preprocessing cases are compared by the SHA-256 of their pixel values it records).

Why frames and not files on the GPU machine: it has no ffmpeg, PyAV, decord or torchvision
video reader, and lossless clips mean both sides see the same pixels anyway.  The rotated clip
stores its frames turned 90 degrees counterclockwise with an MP4 rotate=90 tag, so the frames a
player displays (the ones given to transformers) are the generated ones.
"""
import hashlib
import json
import os
import subprocess
import sys
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "video")
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny")
TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat", "qwen3vl_instruct_chat_template.jinja")

# name: displayed width, height, fps as (num, den), frames, container/codec, rotate tag (degrees)
CLIPS = {
    "a_ntsc.mkv": dict(w=96, h=72, fps=(30000, 1001), n=45, codec="ffv1", rotate=0, seed=1),
    "b_portrait.mkv": dict(w=72, h=136, fps=(24, 1), n=60, codec="ffv1", rotate=0, seed=2),
    "c_odd.mkv": dict(w=160, h=90, fps=(10, 1), n=25, codec="ffv1", rotate=0, seed=3),
    "d_rot90.mp4": dict(w=64, h=96, fps=(15, 1), n=30, codec="x264rgb", rotate=90, seed=4),
    "e_long.mkv": dict(w=48, h=32, fps=(5, 1), n=120, codec="ffv1", rotate=0, seed=5),
    "f_tiny.mkv": dict(w=48, h=24, fps=(8, 1), n=12, codec="ffv1", rotate=0, seed=6),
}

# Qwen3-VL-2B-Instruct's video_preprocessor_config.json (QWEN3VL.md §1.4) and smaller budgets.
QWEN_SIZE = {"shortest_edge": 4096, "longest_edge": 25165824}
SMALL_SIZE = {"shortest_edge": 4096, "longest_edge": 16384}
SETTINGS = {
    "qwen": dict(size=QWEN_SIZE, cap_pixels_per_frame=False),
    "qwen_cap": dict(size=QWEN_SIZE, cap_pixels_per_frame=True),
    "small": dict(size=SMALL_SIZE, cap_pixels_per_frame=False),
    "small_cap": dict(size=SMALL_SIZE, cap_pixels_per_frame=True),
    "class_cap": dict(cap_pixels_per_frame=True),                 # class defaults: 131072 / 786432
    "fps1_max6": dict(size=QWEN_SIZE, cap_pixels_per_frame=True, fps=1, max_frames=6),
    "fps05_min2": dict(size=QWEN_SIZE, cap_pixels_per_frame=True, fps=0.5, min_frames=2),
}

# tiny-model cases: the class-default sizes with the per-frame cap (what iris uses by default
# for a model without video_preprocessor_config.json)
MODEL_SETTINGS = "class_cap"
MODEL_CASES = {
    "video": [{"type": "video", "video": "b_portrait.mkv"},
              {"type": "text", "text": "What happens in this video?"}],
    "image_video": [{"type": "image", "image": "a.png"}, {"type": "video", "video": "c_odd.mkv"},
                    {"type": "text", "text": "Describe it."}],
    "video_rot": [{"type": "video", "video": "d_rot90.mp4"}, {"type": "text", "text": "Describe it."}],
}
MODELS = ["tiny-gqa", "tiny-mqa"]
N_GREEDY = 12


def frames_of(name):
    """uint8 [n, h, w, 3] of the displayed frames: gradients, stripes, a square moving one
    step a frame and a frame-number bar, so any wrong index, order or rotation shows."""
    c = CLIPS[name]
    n, h, w, s = c["n"], c["h"], c["w"], c["seed"]
    y = np.arange(h, dtype=np.int64)[:, None]
    x = np.arange(w, dtype=np.int64)[None, :]
    out = np.zeros((n, h, w, 3), np.uint8)
    for i in range(n):
        r = (x * 255 // max(w - 1, 1) + 3 * i) % 256 + 0 * y
        g = (y * 255 // max(h - 1, 1) + 5 * i * s) % 256 + 0 * x
        b = (((x + i) // 8 + y // 8) % 2) * 120 + 60 + 0 * (x + y)
        f = np.stack([r, g, b], -1)
        sz = max(4, min(h, w) // 4)
        y0 = (i * 2 + s) % max(h - sz, 1)
        x0 = (i * 3 + 2 * s) % max(w - sz, 1)
        f[y0:y0 + sz, x0:x0 + sz] = [250, 250 - 10 * s, 20]
        bar = (i * w) // max(n, 1)
        f[h - 3:, :bar + 1] = [10, 10, 10]
        if x.shape[1] > 0:
            f[:2, :] = [(i * 37) % 256, (i * 91) % 256, (i * 53) % 256]
        out[i] = f.astype(np.uint8)
    return out


def frame_hashes(frames):
    return [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames]


def make():
    os.makedirs(FIX, exist_ok=True)
    meta = {"note": "written by tools/ref_video.py make; frames are the displayed RGB frames, HWC",
            "clips": {}}
    for name, c in CLIPS.items():
        fr = frames_of(name)
        # av_display_rotation_get() of the tag's matrix is +90: players turn the stored frame
        # 90 degrees counterclockwise, so store it turned clockwise
        stored = np.ascontiguousarray(np.rot90(fr, k=-1, axes=(1, 2))) if c["rotate"] == 90 else fr
        n, h, w, _ = stored.shape
        path = os.path.join(FIX, name)
        cmd = ["ffmpeg", "-y", "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{w}x{h}", "-r", f"{c['fps'][0]}/{c['fps'][1]}", "-i", "-",
               "-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1"]
        if c["codec"] == "ffv1":
            cmd += ["-c:v", "ffv1", "-level", "3", "-coder", "1", "-context", "1", "-g", "10", "-pix_fmt", "bgr0"]
        else:
            cmd += ["-c:v", "libx264rgb", "-qp", "0", "-preset", "medium", "-g", "10", "-pix_fmt", "rgb24"]
        tmp = path + ".tmp" + os.path.splitext(name)[1]
        cmd.append(tmp if c["rotate"] else path)
        subprocess.run(cmd, input=stored.tobytes(), check=True)
        if c["rotate"]:
            # ffmpeg 5.1 writes the rotate tag's display matrix only when remuxing
            subprocess.run(["ffmpeg", "-y", "-hide_banner", "-loglevel", "error", "-i", tmp, "-c", "copy",
                            "-fflags", "+bitexact", "-map_metadata", "-1",
                            "-metadata:s:v:0", f"rotate={c['rotate']}", path], check=True)
            os.remove(tmp)
        meta["clips"][name] = dict(width=c["w"], height=c["h"], fps=list(c["fps"]), n_frames=c["n"],
                                   codec=c["codec"], rotate=c["rotate"], bytes=os.path.getsize(path),
                                   frame_sha256=frame_hashes(fr))
        print(f"{name}: {c['w']}x{c['h']} {n} frames -> {os.path.getsize(path)} bytes", flush=True)
    with open(os.path.join(FIX, "clips.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("wrote", os.path.join(FIX, "clips.json"))


# ------------------------------------------------------------------------------------------
# the reference (GPU machine)

def calc_timestamps(indices, fps, merge=2):
    """Qwen3VLProcessor._calculate_timestamps, restated to cross-check the processor."""
    idx = list(indices)
    if len(idx) % merge:
        idx += [idx[-1]] * (merge - len(idx) % merge)
    ts = [i / fps for i in idx]
    return [(ts[i] + ts[i + merge - 1]) / 2 for i in range(0, len(ts), merge)]


def video_inputs(vp, frames, md):
    """transformers' video processor on decoded frames [T, H, W, 3] with their metadata: it samples
    (do_sample_frames) and preprocesses.  Returns pixel_values_videos, video_grid_thw (tensors) and
    the sampled indices (from the returned metadata, else from vp.sample_frames itself)."""
    import torch
    video = torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()   # [T, C, H, W] uint8
    o = vp(videos=[video], video_metadata=[dict(md)], do_sample_frames=True, return_metadata=True)
    pv = o["pixel_values_videos"]
    pv = torch.cat(list(pv)) if isinstance(pv, (list, tuple)) else torch.as_tensor(pv)
    grid = o["video_grid_thw"]
    grid = torch.as_tensor(np.asarray([np.asarray(g) for g in grid]) if isinstance(grid, (list, tuple)) else grid)
    grid = grid.reshape(-1, 3)
    idx = None
    vm = o.get("video_metadata") if hasattr(o, "get") else None
    if vm is not None:
        m = vm[0] if isinstance(vm, (list, tuple)) else vm
        idx = m.get("frames_indices") if isinstance(m, dict) else getattr(m, "frames_indices", None)
    if idx is None:
        from transformers.video_utils import VideoMetadata
        idx = vp.sample_frames(VideoMetadata(**md))
    return pv, grid, np.asarray(idx, dtype=np.int64).reshape(-1)


def ref(out):
    import torch
    import transformers
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    log = lambda *a: print(*a, flush=True)
    log("torch", torch.__version__, "transformers", transformers.__version__)
    clips_meta = json.load(open(os.path.join(FIX, "clips.json")))["clips"]
    arrays, res = {}, {"transformers": transformers.__version__, "torch": torch.__version__,
                       "settings": SETTINGS, "model_settings": MODEL_SETTINGS, "cases": {}, "models": {},
                       "frames_match_clips_json": {}}
    frames = {}
    for name in CLIPS:
        fr = frames_of(name)
        ok = frame_hashes(fr) == clips_meta[name]["frame_sha256"]
        res["frames_match_clips_json"][name] = ok
        if not ok:
            log(f"!! {name}: regenerated frames differ from clips.json (numpy arithmetic changed?)")
        frames[name] = fr

    def metadata(name):
        c = CLIPS[name]
        fps = c["fps"][0] / c["fps"][1]
        return {"total_num_frames": c["n"], "fps": fps, "width": c["w"], "height": c["h"],
                "duration": c["n"] / fps}

    def processor(sname):
        kw = dict(SETTINGS[sname])
        return Qwen3VLVideoProcessor(**kw)

    def run_vp(vp, name):
        return video_inputs(vp, frames[name], metadata(name))

    # --- preprocessing: every clip under every setting
    for sname in SETTINGS:
        for name in CLIPS:
            key = f"{os.path.splitext(name)[0]}.{sname}"
            try:
                vp = processor(sname)
                pv, grid, idx = run_vp(vp, name)
                pv, grid = pv.float().numpy(), grid.numpy().astype(np.int64)
                own = np.linspace(0, CLIPS[name]["n"] - 1, len(idx)).round().astype(np.int64) \
                    if idx is not None else None
                arrays[key + ".pixel_values"] = pv.astype(np.float32)
                arrays[key + ".grid_thw"] = grid
                if idx is not None:
                    arrays[key + ".indices"] = idx
                md = metadata(name)
                ts = calc_timestamps(idx.tolist(), md["fps"]) if idx is not None else None
                res["cases"][key] = dict(clip=name, settings=sname, grid_thw=grid.tolist(),
                                         indices=idx.tolist() if idx is not None else None,
                                         indices_are_linspace=bool(own is not None and np.array_equal(own, idx)),
                                         timestamps=[f"{t:.1f}" for t in ts] if ts else None,
                                         pixel_values_shape=list(pv.shape),
                                         pixel_values_sha256=hashlib.sha256(pv.astype(np.float32).tobytes())
                                         .hexdigest())
                log(f"[{key}] grid {grid.tolist()} indices {idx.tolist() if idx is not None else None}")
            except Exception:  # noqa: one case failing keeps the rest
                traceback.print_exc()
                res["cases"][key] = {"error": traceback.format_exc()}

    # --- the tiny models
    try:
        model_cases(res, arrays, frames, metadata, processor, log)
    except Exception:  # noqa
        traceback.print_exc()
        res["models_error"] = traceback.format_exc()

    np.savez_compressed(os.path.join(out, "video_ref.npz"), **arrays)
    with open(os.path.join(out, "video_ref.json"), "w") as f:
        json.dump(res, f, indent=1)
    for fn in ("video_ref.npz", "video_ref.json"):
        p = os.path.join(out, fn)
        log("wrote", p, os.path.getsize(p), "bytes")


def model_cases(res, arrays, frames, metadata, processor, log):
    import torch
    import tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3VLForConditionalGeneration
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    except Exception:  # noqa
        from transformers import Qwen2VLImageProcessor
    from torchvision.io import decode_image, ImageReadMode

    man = json.load(open(os.path.join(TINY, "manifest.json")))
    sp = man["special_ids"]
    IMAGE_PAD, VIDEO_PAD = sp["<|image_pad|>"], sp["<|video_pad|>"]
    tok_path = os.path.join(TINY, "tokenizer", "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_path)
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    tpl = open(TEMPLATE).read()
    ip = Qwen2VLImageProcessor(size={"longest_edge": man["max_pixels"], "shortest_edge": man["min_pixels"]},
                               patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                               image_std=[0.5] * 3)
    vsname = MODEL_SETTINGS

    inputs = {}
    for cname, content in MODEL_CASES.items():
        try:
            msgs = [{"role": "user", "content": content}]
            text = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, chat_template=tpl)
            imgs = [decode_image(os.path.join(TINY, "images", c["image"]), mode=ImageReadMode.RGB)
                    for c in content if c["type"] == "image"]
            vids = [c["video"] for c in content if c["type"] == "video"]
            pv = grid = None
            if imgs:
                o = ip(images=imgs, return_tensors="pt")
                pv, grid = o["pixel_values"].float(), o["image_grid_thw"]
            vp = processor(vsname)
            vouts = []
            for v in vids:
                vpv, vg, idx = video_inputs(vp, frames[v], metadata(v))
                vouts.append((vpv.float(), vg, list(idx), metadata(v)["fps"]))
            # expand as Qwen3VLProcessor does (replace_image_token / replace_video_token)
            expanded, gi, vi, rest = "", 0, 0, text
            while True:
                a, b = rest.find("<|image_pad|>"), rest.find("<|video_pad|>")
                if a < 0 and b < 0:
                    expanded += rest
                    break
                if b < 0 or (0 <= a < b):
                    expanded += rest[:a] + "<|image_pad|>" * int(grid[gi].prod() // 4)
                    rest, gi = rest[a + len("<|image_pad|>"):], gi + 1
                else:
                    vpv, vg, idx, fps = vouts[vi]
                    t, gh, gw = [int(x) for x in vg[0]]
                    ts = calc_timestamps([int(i) for i in idx], fps)
                    ph = "".join(f"<{ts[k]:.1f} seconds>" + "<|vision_start|>" + "<|video_pad|>" * (gh * gw // 4) +
                                 "<|vision_end|>" for k in range(t))
                    expanded += rest[:b] + ph
                    rest, vi = rest[b + len("<|video_pad|>"):], vi + 1
            ids = np.array(tok.encode(expanded, add_special_tokens=False).ids, dtype=np.int64)
            mm = np.where(ids == IMAGE_PAD, 1, np.where(ids == VIDEO_PAD, 2, 0)).astype(np.int64)
            info = dict(text=text, expanded=expanded, n_tokens=int(len(ids)), messages=msgs,
                        video_settings=vsname)
            # the processor itself, when it can be built without a hub: its ids must agree
            try:
                from transformers import Qwen3VLProcessor
                proc = Qwen3VLProcessor(image_processor=ip, tokenizer=hf_tok, video_processor=processor(vsname),
                                        chat_template=tpl)
                kw = dict(text=[text], return_tensors="pt")
                if imgs:
                    kw["images"] = imgs
                if vids:
                    kw["videos"] = [torch.from_numpy(frames[v]).permute(0, 3, 1, 2).contiguous() for v in vids]
                    kw["video_metadata"] = [metadata(v) for v in vids]
                    kw["do_sample_frames"] = True
                po = proc(**kw)
                pids = po["input_ids"][0].numpy()
                info["processor_ids_equal"] = bool(np.array_equal(pids, ids))
                if "mm_token_type_ids" in po:
                    info["processor_mm_equal"] = bool(np.array_equal(po["mm_token_type_ids"][0].numpy(), mm))
                if vids:
                    info["processor_pixels_equal"] = bool(torch.equal(po["pixel_values_videos"].float(),
                                                                      torch.cat([x[0] for x in vouts])))
                if not info["processor_ids_equal"]:
                    info["processor_text"] = tok.decode(pids.tolist(), skip_special_tokens=False)
                    log(f"[{cname}] Qwen3VLProcessor ids differ from the manual expansion")
            except Exception as e:  # noqa
                info["processor_error"] = repr(e)
                log(f"[{cname}] Qwen3VLProcessor: {e!r}")
            kw = dict(input_ids=torch.tensor(ids[None]), attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                      mm_token_type_ids=torch.tensor(mm[None]))
            if imgs:
                kw["pixel_values"], kw["image_grid_thw"] = pv, grid
                arrays[f"model.{cname}.pixel_values"] = pv.numpy().astype(np.float32)
                arrays[f"model.{cname}.image_grid_thw"] = grid.numpy().astype(np.int64)
            if vids:
                kw["pixel_values_videos"] = torch.cat([x[0] for x in vouts])
                kw["video_grid_thw"] = torch.cat([x[1] for x in vouts])
                arrays[f"model.{cname}.pixel_values_videos"] = kw["pixel_values_videos"].numpy().astype(np.float32)
                arrays[f"model.{cname}.video_grid_thw"] = kw["video_grid_thw"].numpy().astype(np.int64)
                info["video_indices"] = [[int(i) for i in x[2]] for x in vouts]
            arrays[f"model.{cname}.input_ids"] = ids
            arrays[f"model.{cname}.mm_token_type_ids"] = mm
            inputs[cname] = (kw, info)
            log(f"[{cname}] {len(ids)} tokens: {expanded[:300]!r}")
        except Exception:  # noqa
            traceback.print_exc()
            res["models"].setdefault("inputs_error", {})[cname] = traceback.format_exc()
    res["model_inputs"] = {c: i for c, (_, i) in inputs.items()}

    for mname in MODELS:
        try:
            ref = Qwen3VLForConditionalGeneration.from_pretrained(os.path.join(TINY, mname, "model"),
                                                                  dtype=torch.float32, attn_implementation="eager")
            ref = ref.float().eval()
        except Exception:  # noqa
            traceback.print_exc()
            res["models"][mname] = {"error": traceback.format_exc()}
            continue
        res["models"][mname] = {}
        for cname, (kw, info) in inputs.items():
            hooks = []
            try:
                rec = {}

                def lm_pre(mod, args, kwargs):
                    if kwargs.get("position_ids") is not None:
                        rec["position_ids"] = kwargs["position_ids"].detach().clone()

                def merger_post(mod, args, kwargs, o):
                    rec.setdefault("merger", []).append(o.detach().float().clone())

                hooks.append(ref.model.language_model.register_forward_pre_hook(lm_pre, with_kwargs=True))
                hooks.append(ref.model.visual.merger.register_forward_hook(merger_post, with_kwargs=True))
                o = ref(**kw)
                for h in hooks:
                    h.remove()
                hooks = []
                key = f"{mname}.{cname}"
                logits = o.logits[0].float().numpy()
                arrays[key + ".logits"] = logits.astype(np.float32)
                r = dict(logits_max_abs=float(np.abs(logits).max()))
                if "position_ids" in rec:
                    p = rec["position_ids"].numpy()
                    p = p[:, 0, :] if p.ndim == 3 else p[None].repeat(3, 0)
                    if p.shape[0] == 4:
                        p = p[1:]
                    arrays[key + ".position_ids"] = p.astype(np.int64)
                if "merger" in rec:
                    arrays[key + ".vision_embeds"] = torch.cat(rec["merger"]).numpy().astype(np.float32)
                rd = getattr(o, "rope_deltas", None)
                r["rope_delta"] = int(rd.reshape(-1)[0]) if rd is not None else None
                ids = kw["input_ids"][0].numpy()
                mm = kw["mm_token_type_ids"][0].numpy()
                toks, margins = [], []
                for _ in range(N_GREEDY):
                    k2 = dict(kw, input_ids=torch.tensor(ids[None]),
                              attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                              mm_token_type_ids=torch.tensor(mm[None]))
                    lo = ref(**k2).logits[0, -1].float()
                    top = torch.topk(lo, 2)
                    toks.append(int(top.indices[0]))
                    margins.append(float(top.values[0] - top.values[1]))
                    ids, mm = np.append(ids, toks[-1]), np.append(mm, 0)
                r["greedy"], r["greedy_min_margin"] = toks, min(margins)
                res["models"][mname][cname] = r
                log(f"[{key}] max|logit| {r['logits_max_abs']:.3f} greedy {toks} margin {min(margins):.4f} "
                    f"rope_delta {r['rope_delta']}")
            except Exception:  # noqa
                for h in hooks:
                    h.remove()
                traceback.print_exc()
                res["models"][mname][cname] = {"error": traceback.format_exc()}
        del ref


def unpack(d):
    dst = os.path.join(FIX, "ref")
    os.makedirs(dst, exist_ok=True)
    z = np.load(os.path.join(d, "video_ref.npz"))
    res = json.load(open(os.path.join(d, "video_ref.json")))
    kept, sums = 0, {}
    for k in z.files:
        # the preprocessing cases are checked by the SHA-256 in video_ref.json, the model cases'
        # pixel values too (recorded here); their ids, positions and logits are kept whole
        if k.split(".")[0] not in ["model"] + MODELS or k.endswith(".vision_embeds"):
            continue
        if k.endswith(".pixel_values") or k.endswith(".pixel_values_videos"):
            sums[k] = hashlib.sha256(np.ascontiguousarray(z[k], dtype=np.float32).tobytes()).hexdigest()
            continue
        np.save(os.path.join(dst, k + ".npy"), z[k])
        kept += 1
    res["model_pixels_sha256"] = sums
    with open(os.path.join(dst, "video_ref.json"), "w") as g:
        json.dump(res, g, indent=1)
    print(f"{kept} of {len(z.files)} arrays into {dst}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        make()
    elif len(sys.argv) >= 3 and sys.argv[1] == "ref":
        ref(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "unpack":
        unpack(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
