#!/usr/bin/env python3
"""ref_chat.py: chat-template conformance conversations and their HF renderings.

  python3 tools/ref_chat.py make           (here) writes tests/fixtures/chat/conversations.jsonl:
        one object per line: messages (OpenAI style), add_generation_prompt,
        add_vision_id, image_tokens (a token count per image, for the pad
        expansion helper) and, for conversations with tool definitions,
        tools (a list of OpenAI tool objects, given as apply_chat_template's
        tools=).
  python3 tools/ref_chat.py local OUT.jsonl (here, plain jinja2: a development
        preview only, never a fixture)
  python3 tools/ref_chat.py ref OUTDIR      (the GPU machine) renders every
        conversation with transformers' apply_chat_template(tokenize=False) and
        the committed template tests/fixtures/chat/qwen3vl_instruct_chat_template.jinja
        (Qwen3-VL-2B/4B-Instruct's chat_template.json, SHA-256 3636d0f0...a489e4),
        and writes OUTDIR/conversations.jsonl (the same as make's) and
        OUTDIR/chat_expected.jsonl: {"text": ...} or {"error": ...}
        per conversation, plus "ids": the real tokenizer's ids of the text with
        each <|image_pad|> expanded to its image_tokens count (what the
        processor feeds the model).  Nothing is read from the network; a
        conversation that fails is written as {"error": ...} and the rest go on.
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

    def add(messages, gen=True, vid=False, tokens=None, tools=None):
        n_img = 0
        for m in messages:
            if isinstance(m.get("content"), list) and m.get("role") in ("user", "tool"):
                for p in m["content"]:
                    if isinstance(p, dict) and (p.get("type") == "image" or "image" in p or "image_url" in p):
                        n_img += 1
        conv = {"messages": messages, "add_generation_prompt": gen, "add_vision_id": vid,
                "image_tokens": tokens if tokens is not None else [4 + 5 * i for i in range(n_img)]}
        if tools is not None:
            conv["tools"] = tools
        c.append(conv)

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
    tool_conversations(add)
    return c


def fn(name, description, parameters, **extra):
    f = {"name": name, "description": description, "parameters": parameters}
    f.update(extra)
    return {"type": "function", "function": f}


WEATHER = fn("get_weather", "Get the current weather in a city.",
             {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"},
                                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
              "required": ["city"]})
SEARCH = fn("search_images", "Find images that match a query.",
            {"type": "object",
             "properties": {"query": {"type": "string"},
                            "filters": {"type": "object",
                                        "properties": {"min_width": {"type": "integer", "minimum": 1},
                                                       "colors": {"type": "array", "items": {"type": "string"},
                                                                  "maxItems": 3},
                                                       "box": {"type": "array", "prefixItems": [
                                                           {"type": "number"}, {"type": "number"}]},
                                                       "safe": {"type": "boolean", "default": True},
                                                       "after": {"type": ["string", "null"], "default": None}},
                                        "additionalProperties": False},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}},
             "required": ["query"], "additionalProperties": False})
UNICODE = fn("traduire", "Traduit un texte — 翻译文本 🌍 «naïve» \"quoted\" back\\slash\nnew line\ttab \u0001 \u2028",
             {"type": "object", "properties": {"texte": {"type": "string", "description": "Le texte à traduire"},
                                               "langue": {"type": "string", "enum": ["français", "日本語", "Ελληνικά"]}},
              "required": ["texte", "langue"]})
NUMBERS = fn("numbers", "Floats and ints as Python prints them.",
             {"type": "object", "properties": {"x": {"type": "number", "minimum": -1.5, "maximum": 1e20,
                                                     "multipleOf": 0.001, "default": 2.0, "examples": [1e-7, 123456.789,
                                                                                                       -0.0, 3, 0.1]}}})
NO_PARAMS = fn("now", "The current time.", {"type": "object", "properties": {}})
BARE = {"name": "bare", "description": "A tool given without the type/function wrapper.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}
EMPTY_KEYS = {"type": "function", "function": {"name": "odd", "description": "", "parameters": {}}, "extra": [1, {}]}


def call(name, args, cid=None):
    c = {"type": "function", "function": {"name": name, "arguments": args}}
    if cid:
        c["id"] = cid
    return c


def tool_conversations(add):
    q = {"role": "user", "content": "What is the weather in Paris?"}
    add([q], tools=[WEATHER])
    add([q], tools=[WEATHER], gen=False)
    add([{"role": "system", "content": "You are a helpful assistant."}, q], tools=[WEATHER])
    add([{"role": "system", "content": [T("Be brief. "), T("Use tools.")]}, q], tools=[WEATHER, SEARCH])
    add([{"role": "system", "content": ""}, q], tools=[WEATHER])
    add([{"role": "user", "content": [IMG, T("Find more like this.")]}], tools=[SEARCH, WEATHER, NO_PARAMS])
    add([{"role": "user", "content": "Traduis « bonjour » en japonais."}], tools=[UNICODE])
    add([q], tools=[NUMBERS, BARE, EMPTY_KEYS])
    add([q], tools=[])
    # History: OpenAI clients send arguments as a JSON string and content null or "".
    # (content null fails in the template: `for x in None`; the server drops a null content, which is
    # the second form, content absent.)
    for content in ({"content": None}, {}):
        add([q, dict({"role": "assistant", "tool_calls": [call("get_weather", "{\"city\": \"Paris\"}", "call_1")]},
                     **content),
             {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
            tools=[WEATHER])
    add([q, {"role": "assistant", "content": "", "tool_calls": [call("get_weather", "{\"city\":\"Paris\"}", "c1")]},
         {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
         {"role": "assistant", "content": "It is 21 °C in Paris."},
         {"role": "user", "content": "And in Tokyo and Köln?"}], tools=[WEATHER])
    # Parallel calls, arguments as objects (rendered with tojson), two results grouped in one user turn.
    add([{"role": "system", "content": "sys"},
         {"role": "user", "content": "Weather in Tokyo and Köln, then find pictures."},
         {"role": "assistant", "content": "Let me check both.", "tool_calls": [
             call("get_weather", {"city": "東京", "unit": "celsius"}),
             call("get_weather", {"city": "Köln", "nested": {"a": [1, 2.5, None, True, False], "b": {}}})]},
         {"role": "tool", "content": "{\"t\": 18}"},
         {"role": "tool", "content": [T("{\"t\": 9}")]},
         {"role": "assistant", "tool_calls": [
             call("search_images", {"query": "rain \"umbrella\"\n", "filters": {"colors": ["red"], "min_width": 640}})]},
         {"role": "tool", "content": [IMG, T("one match")]}],
        tools=[WEATHER, SEARCH, UNICODE])
    # A tool result first, three results in a row, and a tool turn at the end without a generation prompt.
    add([{"role": "tool", "content": "orphan"}, {"role": "tool", "content": "two"}, {"role": "tool", "content": ""},
         {"role": "user", "content": "ok"}], tools=[NO_PARAMS])
    add([q, {"role": "assistant", "content": "", "tool_calls": [call("now", "{}")]},
         {"role": "tool", "content": "12:00"}], tools=[NO_PARAMS], gen=False)
    # Tool history with no tools given: no system block of tools.
    add([q, {"role": "assistant", "tool_calls": [call("get_weather", "{\"city\": \"Paris\"}")]},
         {"role": "tool", "content": "sunny"}])
    add([{"role": "user", "content": None}], tools=[WEATHER])
    # Markup the model emits, quoted inside a tool description and a result.
    add([{"role": "user", "content": "<tool_call> in text"}, {"role": "assistant", "content": "x"},
         {"role": "tool", "content": "</tool_response> inside"}],
        tools=[fn("quote", "Say <tool_call> and </tool_call> literally.", {"type": "object", "properties": {}})])


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
                row = {"text": tpl.render(messages=conv["messages"], tools=conv.get("tools"),
                                          add_generation_prompt=conv["add_generation_prompt"],
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
    # The conversations come from this script (not from a checkout's fixture file), and are written
    # beside the renderings so the pair is committed together.
    convs = conversations()
    with open(os.path.join(outdir, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for conv in convs:
            f.write(json.dumps(conv, ensure_ascii=False) + "\n")
    with open(os.path.join(outdir, "chat_expected.jsonl"), "w", encoding="utf-8") as f:
        for conv in convs:
            try:
                text = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"), chat_template=template,
                                               tokenize=False,
                                               add_generation_prompt=conv["add_generation_prompt"],
                                               add_vision_id=conv["add_vision_id"])
                if not isinstance(text, str):  # a BatchEncoding-like answer in some versions
                    text = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"), chat_template=template,
                                                   tokenize=False, return_dict=False,
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
    print("wrote", os.path.join(outdir, "conversations.jsonl"), "and", os.path.join(outdir, "chat_expected.jsonl"))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        cmd_make()
    elif len(sys.argv) >= 3 and sys.argv[1] == "local":
        cmd_local(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "ref":
        cmd_ref(sys.argv[2])
    else:
        sys.exit(__doc__)
