#!/usr/bin/env python3
"""ref_models.py: references for the 8B shape, plain Qwen3 text models and the Thinking templates.

  python3 tools/ref_models.py ref OUTDIR   (the GPU machine: torch, transformers 5.17, no network)

Extends tools/make_tiny_models.py (its tokenizer, images, conversations, rope index, Qwen3-VL
config (config_kwargs), init and .npy writer are reused, not copied) with:
  (a) tiny-8b: a tiny Qwen3VLForConditionalGeneration shaped like Qwen3-VL-8B where the shape
      matters to the code: an untied lm_head, three DeepStack taps (the 8B's [8, 16, 24] of 27
      scaled to [1, 3, 4] of 5), GQA 4 (32/8 on the 8B), intermediate = 3 x hidden (12288/4096),
      q heads x head_dim == hidden.  Scenarios "text" and "image" (make_tiny_models' prompts).
  (b) tiny-qwen3: a tiny Qwen3ForCausalLM (no vision, text fields at the top level, 1-D RoPE,
      tied like Qwen3-0.6B; its chat template is plain Qwen3's, in tokenizer_config.json).
      Scenarios "text" (enable_thinking default) and "nothink" (enable_thinking=False).
  (c) chat_expected.jsonl: transformers' apply_chat_template on the Thinking template of
      Qwen3-VL-*-Thinking (tests/fixtures/chat/qwen3vl_thinking_chat_template.jinja) and on plain
      Qwen3's (tests/fixtures/chat/qwen3_chat_template.jinja), over the conversations of
      tools/ref_chat.py plus the reasoning cases below.

Each model is built in bf16 and saved; the reference is that checkpoint loaded in float32, CPU,
eager attention (QWEN3VL.md §11), so the bf16 weight values are the same ones iris reads.

Output (at most 5 files, each well under 16 MB):
  OUTDIR/tiny-8b.tar, OUTDIR/tiny-qwen3.tar   model/ (checkpoint + tokenizer + configs) and
        <scenario>/{input_ids, mm_token_type_ids, image_grid_thw, pixel_values, position_ids,
        logits, hidden, image_embeds, deepstack}.npy (what applies) and manifest.json
  OUTDIR/chat_expected.jsonl   {"template", "conv", "text"|"error"} per rendering
  OUTDIR/manifest.json         versions, per-model summaries (greedy tokens, margins), errors
hidden.npy is [L+1, T, H] float32: row i < L is the input of decoder layer i, row L the last
layer's output before the final norm.  Every case has its own try/except.
"""
import copy
import json
import os
import sys
import tarfile
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_tiny_models as mtm  # noqa: E402
import ref_chat  # noqa: E402

CHAT = os.path.join(ROOT, "tests", "fixtures", "chat")
THINKING_TEMPLATE = os.path.join(CHAT, "qwen3vl_thinking_chat_template.jinja")
QWEN3_TEMPLATE = os.path.join(CHAT, "qwen3_chat_template.jinja")
N_GREEDY = 24
log = lambda *a: print(*a, flush=True)  # noqa: E731

TINY_8B = dict(
    text=dict(hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=1, head_dim=16, rope_theta=5000000.0, mrope_section=[4, 2, 2]),
    vision=dict(depth=5, hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=64,
                deepstack_visual_indexes=[1, 3, 4]),
    seed=11)
TINY_QWEN3 = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, rope_theta=1000000.0, seed=12)


def T(s):
    return {"type": "text", "text": s}


def reasoning_conversations():
    """Cases where the Thinking templates differ from Instruct: reasoning_content, </think> in
    content, the last query index, multi-step tool turns."""
    c = []

    def add(messages, gen=True, vid=False, **kw):
        c.append({"messages": messages, "add_generation_prompt": gen, "add_vision_id": vid, "kwargs": kw})

    add([{"role": "user", "content": "Hi"}])
    add([{"role": "user", "content": "Hi"}], gen=False)
    add([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "Add."}])
    add([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "Add."}],
        gen=False)
    add([{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nb"},
         {"role": "user", "content": "c"}])
    add([{"role": "user", "content": "a"}, {"role": "assistant", "content": "r1</think>b"}], gen=False)
    add([{"role": "user", "content": "a"}, {"role": "assistant", "content": "\n\nplain answer"}], gen=False)
    add([{"role": "user", "content": "a"}, {"role": "assistant", "content": "x", "reasoning_content": "\n\nr\n\n"}],
        gen=False)
    add([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "A2", "reasoning_content": "R2"}],
        gen=False)
    add([{"role": "user", "content": [mtm_img(), T("What is this?")]},
         {"role": "assistant", "content": "A cat.", "reasoning_content": "Whiskers."},
         {"role": "user", "content": [T("And this? "), mtm_img()]}], vid=True)
    add([{"role": "user", "content": "Weather?"},
         {"role": "assistant", "content": "", "reasoning_content": "Need a tool.", "tool_calls": [
             {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
         {"role": "tool", "content": "{\"temp\": 21}"},
         {"role": "assistant", "content": "21 degrees.", "reasoning_content": "Got it."}], gen=False)
    add([{"role": "user", "content": "Weather?"},
         {"role": "assistant", "content": "Let me check.", "tool_calls": [
             {"function": {"name": "w", "arguments": {"city": "Paris"}}}]},
         {"role": "tool", "content": "sunny"}])
    add([{"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
         {"role": "assistant", "content": "ok", "reasoning_content": "r"}], gen=False)
    add([{"role": "system", "content": [T("sys "), T("two")]}, {"role": "user", "content": "x"}])
    add([{"role": "system", "content": "S"}, {"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "f", "description": "d",
                                                 "parameters": {"type": "object", "properties": {}}}}])
    for et in (True, False):
        add([{"role": "user", "content": "Hi"}], enable_thinking=et)
        add([{"role": "user", "content": "q"}, {"role": "assistant", "content": "A", "reasoning_content": "R"},
             {"role": "user", "content": "q2"}], enable_thinking=et)
    add([{"role": "user", "content": [T("list content")]}, {"role": "assistant", "content": [T("parts")]}],
        gen=False)
    return c


def mtm_img():
    return {"type": "image", "image": "file:///tmp/a.jpg"}


def conversations():
    rows = []
    for i, conv in enumerate(ref_chat.conversations()):
        conv = dict(conv)
        tools = conv.pop("tools", None)
        rows.append(dict(conv, kwargs={} if tools is None else {"tools": tools}, src=f"ref_chat:{i}"))
    for i, conv in enumerate(reasoning_conversations()):
        rows.append(dict(conv, src=f"reasoning:{i}"))
    return rows


def cmd_chat(outdir, manifest):
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(mtm.TOK_DIR, "tokenizer.json"))
    templates = {"qwen3vl_thinking": open(THINKING_TEMPLATE, encoding="utf-8").read(),
                 "qwen3": open(QWEN3_TEMPLATE, encoding="utf-8").read()}
    n = {"ok": 0, "error": 0}
    with open(os.path.join(outdir, "chat_expected.jsonl"), "w", encoding="utf-8") as f:
        for name, tpl in templates.items():
            for conv in conversations():
                row = {"template": name, "conv": conv}
                try:
                    kw = dict(conv.get("kwargs", {}))
                    tools = kw.pop("tools", None)
                    text = tok.apply_chat_template(conv["messages"], tools=tools, chat_template=tpl, tokenize=False,
                                                   add_generation_prompt=conv["add_generation_prompt"],
                                                   add_vision_id=conv["add_vision_id"], **kw)
                    if not isinstance(text, str):
                        raise TypeError(f"apply_chat_template returned {type(text).__name__}")
                    row["text"] = text
                    n["ok"] += 1
                except Exception as e:  # noqa: an error is a reference too (the template raised)
                    row["error"] = f"{type(e).__name__}: {e}"
                    n["error"] += 1
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    manifest["chat"] = n
    log(f"chat: {n['ok']} rendered, {n['error']} errors -> chat_expected.jsonl")


def pack(outdir, name, src):
    path = os.path.join(outdir, name + ".tar")
    with tarfile.open(path, "w") as tf:
        tf.add(src, arcname=name)
    log(f"wrote {path} ({os.path.getsize(path)} bytes)")


def hidden_hooks(layers, rec):
    hooks = []

    def pre(i):
        def f(mod, args, kwargs):
            hs = args[0] if args else kwargs["hidden_states"]
            rec.setdefault("layer_in", {})[i] = hs.detach().float().clone()
        return f

    def post(mod, args, kwargs, out):
        o = out[0] if isinstance(out, (tuple, list)) else out
        rec["last_out"] = o.detach().float().clone()
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(pre(i), with_kwargs=True))
    hooks.append(layers[-1].register_forward_hook(post, with_kwargs=True))
    return hooks


def greedy(ref, make_inputs, ids, mm, torch):
    """Argmax of the reference's logits, N_GREEDY tokens, full recompute each step, no stop."""
    toks, margins = [], []
    for _ in range(N_GREEDY):
        lo = ref(**make_inputs(ids, mm)).logits[0, -1].float()
        top = torch.topk(lo, 2)
        toks.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        ids = np.append(ids, toks[-1])
        mm = np.append(mm, 0) if mm is not None else None
    return toks, margins


def generate_check(ref, inputs, n_prompt, toks):
    try:
        gc = copy.deepcopy(ref.generation_config)
        gc.do_sample, gc.max_new_tokens, gc.min_new_tokens = False, N_GREEDY, None
        gc.temperature, gc.top_p, gc.top_k = None, None, None
        gc.eos_token_id = [mtm.IM_END, mtm.ENDOFTEXT]
        gc.pad_token_id = mtm.ENDOFTEXT
        g = ref.generate(**inputs, generation_config=gc)[0, n_prompt:].tolist()
        return g, g == toks[:len(g)]
    except Exception as e:  # noqa
        log(f"generate failed: {e!r}")
        return None, None


def write_tokenizer_files(d, template, in_tokenizer_config, generation):
    """make_tiny_models' tokenizer with `template` as the chat template: in chat_template.json
    (Qwen3-VL's layout) or in tokenizer_config.json (plain Qwen3's layout)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(mtm.tokenizer_json(), f, ensure_ascii=False, indent=1)
    tc = mtm.tokenizer_config()
    if in_tokenizer_config:
        tc["chat_template"] = template
    else:
        tc.pop("chat_template", None)
        with open(os.path.join(d, "chat_template.json"), "w") as f:
            json.dump({"chat_template": template}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=4)


def run_tiny_8b(outdir, work, manifest, torch):
    import tokenizers
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from torchvision.io import decode_image, ImageReadMode
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    except Exception:  # noqa
        from transformers import Qwen2VLImageProcessor
    spec, name = TINY_8B, "tiny-8b"
    torch.manual_seed(spec["seed"])
    cfg = Qwen3VLConfig(**mtm.config_kwargs(spec, tied=False))  # untied: the 8B stores its lm_head
    model = Qwen3VLForConditionalGeneration(cfg)
    with torch.no_grad():
        mtm.init_weights(model, spec["seed"], torch)
    model = model.to(torch.bfloat16)
    mdir = os.path.join(work, name)
    ckpt = os.path.join(mdir, "model")
    model.save_pretrained(ckpt)
    mtm.write_tokenizer(ckpt)
    ref = Qwen3VLForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                          attn_implementation="eager").float().eval()
    names = sorted(mtm.list_tensors(ckpt))
    mani = dict(spec=spec, tensors=len(names), lm_head_stored="lm_head.weight" in names,
                config=json.load(open(os.path.join(ckpt, "config.json"))), scenarios={})
    log(f"[{name}] lm_head stored: {mani['lm_head_stored']}, {len(names)} tensors")
    raw = tokenizers.Tokenizer.from_file(os.path.join(mtm.TOK_DIR, "tokenizer.json"))
    ip = Qwen2VLImageProcessor(size={"longest_edge": mtm.MAX_PIXELS, "shortest_edge": mtm.MIN_PIXELS},
                               patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                               image_std=[0.5] * 3)
    lm, visual = ref.model.language_model, ref.model.visual
    for sname in ("text", "image"):
        hooks = []
        try:
            msgs = mtm.SCENARIOS[sname]
            text = mtm.render_manual(msgs)
            paths = [os.path.join(mtm.IMG_DIR, c["image"]) for m in msgs for c in m["content"]
                     if c["type"] == "image"]
            pv, grid = None, np.zeros((0, 3), dtype=np.int64)
            if paths:
                o = ip(images=[decode_image(p, mode=ImageReadMode.RGB) for p in paths], return_tensors="pt")
                pv, grid = o["pixel_values"].float().numpy(), o["image_grid_thw"].numpy().astype(np.int64)
            parts = text.split("<|image_pad|>")
            expanded = parts[0]
            for g, p in zip(grid, parts[1:]):
                expanded += "<|image_pad|>" * int(g.prod() // 4) + p
            ids = np.array(raw.encode(expanded, add_special_tokens=False).ids, dtype=np.int64)
            mm = (ids == mtm.IMAGE_PAD).astype(np.int64)
            d = os.path.join(mdir, sname)
            mtm.save_npy(d, "input_ids", ids)
            mtm.save_npy(d, "mm_token_type_ids", mm)
            mtm.save_npy(d, "image_grid_thw", grid)
            if pv is not None:
                mtm.save_npy(d, "pixel_values", pv.astype(np.float32))
            pos_np, delta_np = mtm.rope_index_np(ids.tolist(), grid.tolist())
            mtm.save_npy(d, "position_ids", pos_np)

            def make_inputs(ids_, mm_):
                kw = dict(input_ids=torch.tensor(ids_[None]), attention_mask=torch.ones((1, len(ids_)), dtype=torch.long),
                          mm_token_type_ids=torch.tensor(mm_[None]))
                if pv is not None:
                    kw["pixel_values"] = torch.tensor(pv)
                    kw["image_grid_thw"] = torch.tensor(grid)
                return kw
            rec = {}
            hooks = hidden_hooks(lm.layers, rec)
            mg = {}
            if pv is not None:
                hooks.append(visual.merger.register_forward_hook(
                    lambda m, a, k, out: mg.setdefault(-1, []).append(out.detach().float().clone()), with_kwargs=True))
                for k, dm in enumerate(visual.deepstack_merger_list):
                    hooks.append(dm.register_forward_hook(
                        (lambda kk: lambda m, a, kw, out: mg.setdefault(kk, []).append(out.detach().float().clone()))(k),
                        with_kwargs=True))
            with torch.no_grad():
                out = ref(**make_inputs(ids, mm))
            for h in hooks:
                h.remove()
            hooks = []
            logits = out.logits[0].float().numpy()
            mtm.save_npy(d, "logits", logits.astype(np.float32))
            L = len(lm.layers)
            mtm.save_npy(d, "hidden", np.stack([rec["layer_in"][i][0].numpy() for i in range(L)] +
                                           [rec["last_out"][0].numpy()]).astype(np.float32))
            info = dict(text=text, n_tokens=int(len(ids)), logits_max_abs=float(np.abs(logits).max()),
                        grid_thw=grid.tolist(), rope_delta_spec=delta_np)
            if mg:
                mtm.save_npy(d, "image_embeds", torch.cat(mg[-1]).numpy().astype(np.float32))
                mtm.save_npy(d, "deepstack", np.stack([torch.cat(mg[k]).numpy() for k in range(len(mg) - 1)])
                         .astype(np.float32))
                info["n_deepstack"] = len(mg) - 1
            with torch.no_grad():
                toks, margins = greedy(ref, make_inputs, ids, mm, torch)
                gen, agrees = generate_check(ref, make_inputs(ids, mm), len(ids), toks)
            info.update(greedy=toks, greedy_margins=margins, greedy_min_margin=min(margins), generate=gen,
                        generate_agrees=agrees)
            log(f"[{name}/{sname}] T={len(ids)} greedy={toks[:8]}... min margin {min(margins):.4f} "
                f"generate agrees={agrees}")
            mani["scenarios"][sname] = info
        except Exception:  # noqa: the other scenario still gets recorded
            for h in hooks:
                h.remove()
            traceback.print_exc()
            mani["scenarios"][sname] = {"error": traceback.format_exc()}
    with open(os.path.join(mdir, "manifest.json"), "w") as f:
        json.dump(mani, f, indent=1)
    manifest["models"][name] = {k: mani[k] for k in ("lm_head_stored", "tensors")}
    manifest["models"][name]["scenarios"] = {k: {kk: vv for kk, vv in s.items() if kk != "text"}
                                             for k, s in mani["scenarios"].items()}
    pack(outdir, name, mdir)


def run_tiny_qwen3(outdir, work, manifest, torch):
    import tokenizers
    from transformers import Qwen3Config, Qwen3ForCausalLM, PreTrainedTokenizerFast
    s, name = TINY_QWEN3, "tiny-qwen3"
    torch.manual_seed(s["seed"])
    cfg = Qwen3Config(vocab_size=mtm.VOCAB, hidden_size=s["hidden_size"], intermediate_size=s["intermediate_size"],
                      num_hidden_layers=s["num_hidden_layers"], num_attention_heads=s["num_attention_heads"],
                      num_key_value_heads=s["num_key_value_heads"], head_dim=s["head_dim"], hidden_act="silu",
                      max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.08,
                      tie_word_embeddings=True, bos_token_id=mtm.ENDOFTEXT, eos_token_id=mtm.IM_END,
                      attention_bias=False, use_sliding_window=False,
                      rope_parameters={"rope_type": "default", "rope_theta": s["rope_theta"]})
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        mtm.init_weights(model, s["seed"], torch)
    model = model.to(torch.bfloat16)
    mdir = os.path.join(work, name)
    ckpt = os.path.join(mdir, "model")
    model.save_pretrained(ckpt)
    tpl = open(QWEN3_TEMPLATE, encoding="utf-8").read()
    write_tokenizer_files(ckpt, tpl, True, {"bos_token_id": mtm.ENDOFTEXT, "pad_token_id": mtm.ENDOFTEXT,
                                            "do_sample": True, "eos_token_id": [mtm.IM_END, mtm.ENDOFTEXT],
                                            "temperature": 0.6, "top_k": 20, "top_p": 0.95})
    ref = Qwen3ForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").float().eval()
    names = sorted(mtm.list_tensors(ckpt))
    mani = dict(spec=s, tensors=len(names), lm_head_stored="lm_head.weight" in names,
                config=json.load(open(os.path.join(ckpt, "config.json"))), scenarios={})
    log(f"[{name}] config: {json.dumps(mani['config'])}")
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(mtm.TOK_DIR, "tokenizer.json"))
    raw = tokenizers.Tokenizer.from_file(os.path.join(mtm.TOK_DIR, "tokenizer.json"))
    msgs = [{"role": "user", "content": "Hello, who are you?"}]
    for sname, kw in (("text", {}), ("nothink", {"enable_thinking": False})):
        hooks = []
        try:
            text = tok.apply_chat_template(msgs, chat_template=tpl, tokenize=False, add_generation_prompt=True, **kw)
            ids = np.array(raw.encode(text, add_special_tokens=False).ids, dtype=np.int64)
            d = os.path.join(mdir, sname)
            mtm.save_npy(d, "input_ids", ids)

            def make_inputs(ids_, mm_):
                return dict(input_ids=torch.tensor(ids_[None]),
                            attention_mask=torch.ones((1, len(ids_)), dtype=torch.long))
            rec = {}
            hooks = hidden_hooks(ref.model.layers, rec)
            with torch.no_grad():
                out = ref(**make_inputs(ids, None))
            for h in hooks:
                h.remove()
            hooks = []
            logits = out.logits[0].float().numpy()
            mtm.save_npy(d, "logits", logits.astype(np.float32))
            L = len(ref.model.layers)
            mtm.save_npy(d, "hidden", np.stack([rec["layer_in"][i][0].numpy() for i in range(L)] +
                                           [rec["last_out"][0].numpy()]).astype(np.float32))
            with torch.no_grad():
                toks, margins = greedy(ref, make_inputs, ids, None, torch)
                gen, agrees = generate_check(ref, make_inputs(ids, None), len(ids), toks)
            mani["scenarios"][sname] = dict(text=text, n_tokens=int(len(ids)), logits_max_abs=float(np.abs(logits).max()),
                                            greedy=toks, greedy_margins=margins, greedy_min_margin=min(margins),
                                            generate=gen, generate_agrees=agrees)
            log(f"[{name}/{sname}] {text!r} T={len(ids)} greedy={toks[:8]}... min margin {min(margins):.4f} "
                f"generate agrees={agrees}")
        except Exception:  # noqa
            for h in hooks:
                h.remove()
            traceback.print_exc()
            mani["scenarios"][sname] = {"error": traceback.format_exc()}
    with open(os.path.join(mdir, "manifest.json"), "w") as f:
        json.dump(mani, f, indent=1)
    manifest["models"][name] = {k: mani[k] for k in ("lm_head_stored", "tensors", "config")}
    manifest["models"][name]["scenarios"] = {k: {kk: vv for kk, vv in sc.items() if kk != "text"}
                                             for k, sc in mani["scenarios"].items()}
    pack(outdir, name, mdir)


def cmd_ref(outdir):
    import tempfile
    os.makedirs(outdir, exist_ok=True)
    manifest = {"models": {}, "errors": {}}
    try:
        import torch
        import transformers
        torch.set_grad_enabled(False)
        torch.manual_seed(0)
        manifest.update(torch=torch.__version__, transformers=transformers.__version__)
        log("torch", torch.__version__, "transformers", transformers.__version__)
    except Exception:  # noqa
        traceback.print_exc()
        torch = None
    work = tempfile.mkdtemp(prefix="ref_models_")
    cases = [("chat", lambda: cmd_chat(outdir, manifest))]
    if torch is not None:
        cases += [("tiny-8b", lambda: run_tiny_8b(outdir, work, manifest, torch)),
                  ("tiny-qwen3", lambda: run_tiny_qwen3(outdir, work, manifest, torch))]
    for cname, fn in cases:
        try:
            fn()
        except Exception:  # noqa: one failure does not lose the rest
            traceback.print_exc()
            manifest["errors"][cname] = traceback.format_exc()
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for fn in sorted(os.listdir(outdir)):
        log(f"  {fn}: {os.path.getsize(os.path.join(outdir, fn))} bytes")
    log("done" if not manifest["errors"] else f"done with errors in {sorted(manifest['errors'])}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "ref":
        cmd_ref(sys.argv[2])
    else:
        sys.exit(__doc__)
