#!/usr/bin/env python3
"""ref_chat.py: chat-template conformance conversations and their HF renderings.

  python3 tools/ref_chat.py make           (here) writes tests/fixtures/chat/conversations.jsonl:
        one object per line: messages (OpenAI style), add_generation_prompt,
        add_vision_id, image_tokens (a token count per image, for the pad
        expansion helper).
  python3 tools/ref_chat.py local OUT.jsonl (here, plain jinja2: a development
        preview only, never a fixture)
  python3 tools/ref_chat.py ref OUTDIR      (the GPU machine) renders every
        conversation with transformers' apply_chat_template(tokenize=False) and
        the committed template tests/fixtures/chat/qwen3vl_instruct_chat_template.jinja
        (Qwen3-VL-2B/4B-Instruct's chat_template.json, SHA-256 3636d0f0...a489e4),
        and writes OUTDIR/chat_expected.jsonl: {"text": ...} or {"error": ...}
        per conversation, plus "ids": the real tokenizer's ids of the text with
        each <|image_pad|> expanded to its image_tokens count (what the
        processor feeds the model).
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "chat")
TEMPLATE = os.path.join(FIX, "qwen3vl_instruct_chat_template.jinja")
QWEN = os.path.join(ROOT, ".cache", "assets", "qwen3", "tokenizer.json")

IMG = {"type": "image", "image": "file:///tmp/a.jpg"}
IMG_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
IMG_NOTYPE = {"image": "https://example.com/cat.png"}
VID = {"type": "video", "video": "file:///tmp/v.mp4"}


def T(s):
    return {"type": "text", "text": s}


def conversations():
    c = []

    def add(messages, gen=True, vid=False, tokens=None):
        n_img = 0
        for m in messages:
            if isinstance(m.get("content"), list) and m.get("role") in ("user", "tool"):
                for p in m["content"]:
                    if isinstance(p, dict) and (p.get("type") == "image" or "image" in p or "image_url" in p):
                        n_img += 1
        c.append({"messages": messages, "add_generation_prompt": gen, "add_vision_id": vid,
                  "image_tokens": tokens if tokens is not None else [4 + 5 * i for i in range(n_img)]})

    add([{"role": "user", "content": "Hello!"}])
    add([{"role": "user", "content": "Hello!"}], gen=False)
    add([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hi"}])
    add([{"role": "system", "content": [T("Be brief. "), T("Answer in English.")]}, {"role": "user", "content": "Hi"}])
    add([{"role": "user", "content": [IMG, T("What is in this image?")]}])
    add([{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": [IMG, T("What is in this image?")]}])
    add([{"role": "user", "content": [T("Describe: "), IMG]}])
    add([{"role": "user", "content": [IMG, IMG_URL, T("Compare the two pictures.")]}])
    add([{"role": "user", "content": [IMG_URL, T("Caption this.")]}], vid=True)
    add([{"role": "user", "content": [IMG_NOTYPE, T("What breed?")]}])
    add([{"role": "user", "content": [{"type": "image"}, T("x")]}])
    add([{"role": "user", "content": [VID, T("What happens in the video?")]}])
    add([{"role": "user", "content": [VID, IMG, T("a"), VID, IMG]}], vid=True)
    add([{"role": "user", "content": [IMG, T("What is this?")]},
         {"role": "assistant", "content": "A cat on a sofa."},
         {"role": "user", "content": "What colour is it?"}])
    add([{"role": "system", "content": "sys"},
         {"role": "user", "content": [IMG, T("first")]},
         {"role": "assistant", "content": "one"},
         {"role": "user", "content": [IMG, IMG, T("second")]},
         {"role": "assistant", "content": [T("two "), T("parts")]},
         {"role": "user", "content": [T("third "), IMG]}], vid=True, tokens=[1, 2, 3, 4])
    add([{"role": "user", "content": [IMG, T("first")]},
         {"role": "assistant", "content": "one"},
         {"role": "user", "content": [IMG, T("second")]}])
    add([{"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the GPU cross the road?"}],
        gen=False)
    add([{"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why?"}], gen=True)
    add([{"role": "user", "content": ""}])
    add([{"role": "user", "content": []}])
    add([{"role": "user", "content": "Use <|im_end|> and <|image_pad|> literally\n\nok"}])
    add([{"role": "user", "content": "你好，世界 🌍 naïve café\r\n\ttab"}])
    add([{"role": "system", "content": [IMG, T("system text"), {"type": "video", "video": "v"}]},
         {"role": "user", "content": [IMG, T("hi")]}], vid=True)
    add([{"role": "user", "content": "first"}, {"role": "system", "content": "late system"},
         {"role": "user", "content": "second"}])
    add([{"role": "user", "content": [T("a"), {"type": "input_audio", "input_audio": {"data": "x"}}, T("b")]}])
    add([{"role": "user", "content": [{"type": "text", "text": "x", "image_url": {"url": "u"}}]}])
    add([{"role": "user", "content": "What is the weather?"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
         {"role": "tool", "content": "{\"temp\": 21}"},
         {"role": "user", "content": "Thanks"}])
    add([{"role": "user", "content": "Two tools"},
         {"role": "assistant", "content": "Calling.", "tool_calls": [
             {"function": {"name": "a", "arguments": {"x": 1, "y": [1.5, "s", None, True], "z": {"k": "v\n\"q\""}}}},
             {"name": "b", "arguments": "{}"}]},
         {"role": "tool", "content": "r1"},
         {"role": "tool", "content": [T("r2 "), IMG]},
         {"role": "assistant", "content": "done"}], vid=True)
    add([{"role": "user", "content": [IMG, IMG, IMG, IMG, IMG, T("five images")]}], vid=True, tokens=[1, 4, 9, 16, 64])
    add([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
         {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}])
    add([{"role": "system", "content": ""}, {"role": "user", "content": "x"}])
    add([{"role": "user", "content": [T("line1\n"), T("\nline2 ")]}], gen=False, vid=True)
    add([{"role": "user", "content": [IMG]}], gen=False)
    add([{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}])
    add([{"role": "user", "content": [IMG, T("What is in this image?")]},
         {"role": "assistant", "content": "A dog."}], gen=False, vid=True)
    add([{"role": "user", "content": [VID, T("video only")]}], vid=True)
    add([])
    return c


def load_template():
    with open(TEMPLATE, encoding="utf-8") as f:
        t = f.read()
    h = hashlib.sha256(t.encode()).hexdigest()
    assert h.startswith("3636d0f0") and h.endswith("a489e4"), h
    return t


def expand_pads(text, counts):
    parts = text.split("<|image_pad|>")
    if len(parts) - 1 != len(counts):
        return None
    out = parts[0]
    for n, p in zip(counts, parts[1:]):
        out += "<|image_pad|>" * n + p
    return out


def cmd_make():
    with open(os.path.join(FIX, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for conv in conversations():
            f.write(json.dumps(conv, ensure_ascii=False) + "\n")
    print(len(conversations()), "conversations")


def read_convs():
    with open(os.path.join(FIX, "conversations.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def cmd_local(out):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)

    def raise_exception(m):
        raise jinja2.exceptions.TemplateError(m)
    env.globals["raise_exception"] = raise_exception
    tpl = env.from_string(load_template())
    with open(out, "w", encoding="utf-8") as f:
        for conv in read_convs():
            try:
                row = {"text": tpl.render(messages=conv["messages"], add_generation_prompt=conv["add_generation_prompt"],
                                          add_vision_id=conv["add_vision_id"])}
            except Exception as e:
                row = {"error": f"{type(e).__name__}: {e}"}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def cmd_ref(outdir):
    import tokenizers
    import transformers
    from transformers import PreTrainedTokenizerFast
    os.makedirs(outdir, exist_ok=True)
    template = load_template()
    tok = PreTrainedTokenizerFast(tokenizer_file=QWEN)
    raw = tokenizers.Tokenizer.from_file(QWEN)
    print("transformers", transformers.__version__)
    n_ok = n_err = 0
    with open(os.path.join(outdir, "chat_expected.jsonl"), "w", encoding="utf-8") as f:
        for conv in read_convs():
            try:
                text = tok.apply_chat_template(conv["messages"], chat_template=template, tokenize=False,
                                               add_generation_prompt=conv["add_generation_prompt"],
                                               add_vision_id=conv["add_vision_id"])
                if not isinstance(text, str):  # a BatchEncoding-like answer in some versions
                    text = tok.apply_chat_template(conv["messages"], chat_template=template, tokenize=False,
                                                   return_dict=False,
                                                   add_generation_prompt=conv["add_generation_prompt"],
                                                   add_vision_id=conv["add_vision_id"])
                row = {"text": text}
                full = expand_pads(text, conv["image_tokens"])
                if full is not None and "<|video_pad|>" not in text:
                    row["ids"] = raw.encode(full, add_special_tokens=False).ids
                n_ok += 1
            except Exception as e:
                row = {"error": f"{type(e).__name__}: {e}"}
                n_err += 1
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"chat: {n_ok} rendered, {n_err} errors")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        cmd_make()
    elif len(sys.argv) >= 3 and sys.argv[1] == "local":
        cmd_local(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "ref":
        cmd_ref(sys.argv[2])
    else:
        sys.exit(__doc__)
