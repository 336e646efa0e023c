#!/usr/bin/env python3
"""ref_tokenizer.py: the tokenizer conformance corpus and its HF references.

Two steps:
  python3 tools/ref_tokenizer.py corpus        (here; stdlib only, deterministic)
      writes tests/fixtures/tokenizer/corpus.jsonl (one JSON string per line),
      decode_cases.jsonl (id lists to decode; made on the GPU machine from the
      real vocabulary, see below) and flags_tokenizer.json (the tiny test
      tokenizer plus added tokens with lstrip/rstrip/single_word/normalized).
  python3 tools/ref_tokenizer.py ref OUTDIR     (the GPU machine; needs `tokenizers`)
      encodes the corpus with tokenizers.Tokenizer.from_file(...) and
      add_special_tokens=False, and writes OUTDIR/qwen3_ids.jsonl (one JSON
      array per corpus line, formatted as `iris tokenize --jsonl` prints),
      qwen3_decode.jsonl, tiny_ids.jsonl and flags_ids.jsonl.

The real tokenizer is .cache/assets/qwen3/tokenizer.json (scripts/setup), the
tiny one tests/fixtures/tiny/tokenizer/tokenizer.json.
"""
import json
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
QWEN = os.path.join(ROOT, ".cache", "assets", "qwen3", "tokenizer.json")
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny", "tokenizer", "tokenizer.json")
SEED = 20251122

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one you were "
         "all her she there would their we him been has when who will no more if out so up said what its about than into "
         "them can only other time new some could these two may first then do any like my now over such our man me even "
         "most made after also did many off before must well back through years much where your way down should because "
         "long each just state people those too how little good world very still own see men work here between both "
         "under never day same another know while last might us great old year came come since against go came right "
         "tokenizer Qwen vision language model image caption GPU kernel cache prefill decode").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>", "<|vision_pad|>", "<|box_start|>", "<|object_ref_end|>", "<tool_call>", "</tool_call>",
            "<think>", "</think>", "<|fim_prefix|>", "<tool_response>", "<|repo_name|>"]
PARTIAL_SPECIALS = ["<|im_start", "im_end|>", "<|im_start |>", "<|IM_START|>", "< think>", "<think", "</think",
                    "<|image_pad|", "<||>", "<|>", "|>"]
SPACES = ["\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008",
          "\u2009", "\u200a", "\u202f", "\u205f", "\u3000", "\u0085", "\u2028", "\u2029", "\u200b", "\ufeff", "\t",
          "\x0b", "\x0c", "\r", "\n", "\r\n", " "]
CJK = ("你好世界今天天气很好我们一起去吃饭吧。中文分词测试，这是一个句子！人工智能视觉语言模型图像描述"
       "日本語のテキストです。ひらがなとカタカナ、漢字を含みます。東京都"
       "한국어 텍스트입니다. 안녕하세요 세계")
SCRIPTS = [
    "مرحبا بالعالم، هذا نص عربي للاختبار. الأرقام: ١٢٣٤٥٦٧٨٩٠",
    "שלום עולם, זהו טקסט בעברית",
    "नमस्ते दुनिया, यह हिंदी पाठ है। क्षत्रिय ज्ञान श्री",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย",
    "Привет, мир! Это русский текст. ЁЛКИ-палки",
    "Γειά σου Κόσμε, ελληνικά κείμενα ΆΈΉ",
    "Ελλάδα ﬁnal ﬂow Straße İstanbul ıi ǅemal ẞ",
    "Tiếng Việt có dấu: người, được, những",
    "ქართული ენა, Հայերեն, አማርኛ",
    "বাংলা ভাষা, தமிழ் மொழி, తెలుగు",
]
EMOJI = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "❤️", "1️⃣", "#️⃣", "🧑🏿‍🤝‍🧑🏻", "🤷🏽‍♀️", "👋🏻",
         "🫠", "🫨", "🐈‍⬛", "✌︎", "☺️", "🧔‍♂️", "👁️‍🗨️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "💯", "🔥"]
COMBINING = ["e\u0301", "a\u0308", "A\u030a", "n\u0303", "o\u0302\u0323", "o\u0323\u0302", "u\u0308\u0301",
             "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "\u0915\u094d\u0937", "z\u0335\u0321\u0322", "\u0301abc",
             "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034d",
             "\u212b", "\u2126", "\u00c5", "\uf900", "\u0958", "\u2000", "\ufb01"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "const add = (a, b) => a + b;\r\nconsole.log(add(1, 2));\r\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "if __name__ == '__main__':\n        main()\n\n\n",
    "    \n    x = {'a': [1, 2, 3], \"b\": None}\n",
    "<div class=\"row\"><span>&nbsp;&lt;tag&gt;</span></div>",
    "$ curl -sSL https://example.com/api/v1/items?id=123&sort=desc | jq '.[0]'",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "x+=1;y-=2;z*=3;w/=4;v%=5;u**=6;t//=7;s<<=8;r>>=9;q&=1;p|=2;o^=3",
    "\t\t\tindented with tabs\n\t\t\t\tand more",
    "matrix = [[1,2],[3,4]]  # 2x2\n\n    print(matrix[0][1])",
]


def rand_word(r):
    w = r.choice(WORDS)
    c = r.random()
    if c < 0.1:
        w = w.upper()
    elif c < 0.25:
        w = w.capitalize()
    return w


def english(r):
    n = r.randint(1, 30)
    out = []
    for i in range(n):
        w = rand_word(r)
        if r.random() < 0.08:
            w += r.choice(CONTRACTIONS)
        out.append(w)
        if r.random() < 0.12:
            out[-1] += r.choice([",", ".", "!", "?", ";", ":", "...", " -", "'", "\""])
    s = " ".join(out)
    if r.random() < 0.3:
        s = s[0].upper() + s[1:] + "."
    return s


def contraction_case(r):
    base = r.choice(["don", "we", "they", "it", "I", "you", "she", "he", "wouldn", "isn", "can"])
    c = r.choice(CONTRACTIONS + ["'ſ", "’s", "’LL", "''s", "'"])
    s = base + c
    mode = r.randint(0, 3)
    if mode == 0:
        s = s.upper()
    elif mode == 1:
        s = "".join(ch.upper() if r.random() < 0.5 else ch.lower() for ch in s)
    elif mode == 2:
        s = s.capitalize()
    return r.choice(["", " ", "x", "1"]) + s + r.choice(["", " ", "s", "!", "\n", "'s"])


def spaces(r):
    parts = []
    for _ in range(r.randint(1, 8)):
        parts.append(r.choice(SPACES) * r.randint(1, 4))
        parts.append(r.choice(["", rand_word(r), "1", "!", "你", "é"]))
    return "".join(parts)


def long_ws(r):
    ws = r.choice([" ", "\n", "\t", "\r\n", " \n", "\u3000", "\u00a0"]) * r.randint(5, 400)
    return r.choice(["", "a", "word ", "x\n"]) + ws + r.choice(["", "b", " end", "\n", "!"])


def digits(r):
    forms = [str(r.randint(0, 10 ** r.randint(1, 30))), f"{r.random() * 1e6:.4f}", "1,234,567.89", "3.14159e-10",
             "٠١٢٣٤٥٦٧٨٩", "０１２３４５", "²³¹", "ⅠⅡⅢⅫ", "½¾", "१२३", "2024-01-31T12:34:56Z", "v1.2.3-rc4",
             "0x1F9A", "$1,000", "50%", "+1 (555) 123-4567"]
    return " ".join(r.choice(forms) for _ in range(r.randint(1, 5)))


def special_embed(r):
    parts = []
    for _ in range(r.randint(1, 6)):
        c = r.random()
        if c < 0.4:
            parts.append(r.choice(SPECIALS))
        elif c < 0.55:
            parts.append(r.choice(PARTIAL_SPECIALS))
        else:
            parts.append(r.choice([english(r), " ", "\n", "abc", "你好", "🙂", "user\n", "<", ">", "|"]))
    return r.choice(["", " "]).join(parts)


def long_word(r):
    c = r.randint(0, 7)
    n = r.randint(200, 12000)
    if c == 0:
        return "a" * n
    if c == 1:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if c == 2:
        return "https://example.com/" + "/".join(rand_word(r) for _ in range(n // 8)) + "?q=" + "x" * 50
    if c == 3:
        return "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(n)) + "=="
    if c == 4:
        return "你" * (n // 3)
    if c == 5:
        return "😀" * (n // 8)
    if c == 6:
        return "-" * n
    return "Supercalifragilisticexpialidocious" * (n // 34)


POOLS = None


def pools():
    global POOLS
    if POOLS is None:
        chars = set()
        for s in [CJK] + SCRIPTS + EMOJI + COMBINING + SPACES + CODE:
            chars.update(s)
        chars.update(chr(c) for c in range(0x20, 0x7f))
        chars.update(chr(c) for c in range(0x100, 0x144))  # the byte-level alphabet itself
        chars.update("ĠĊ¡¬®ÿ\u00ad")
        POOLS = sorted(chars)
    return POOLS


def mixture(r):
    p = pools()
    out = []
    for _ in range(r.randint(1, 12)):
        c = r.random()
        if c < 0.3:
            out.append("".join(r.choice(p) for _ in range(r.randint(1, 10))))
        elif c < 0.5:
            out.append(english(r))
        elif c < 0.6:
            out.append(r.choice(EMOJI))
        elif c < 0.7:
            out.append(r.choice(SPECIALS))
        elif c < 0.8:
            out.append(r.choice(COMBINING))
        elif c < 0.9:
            out.append(r.choice(SPACES))
        else:
            out.append(r.choice(SCRIPTS)[: r.randint(1, 20)])
    return "".join(out)


def fixed_cases():
    cases = ["", " ", "  ", "\n", "\r\n", "\n\n\n", "a", "A", "é", "你", "🙂", "'", "'s", "'S", " 's", "'ſ", "Ġ", "ĠĠ",
             "Hello, world!", "hello world", "Hello World", "HELLO WORLD", "I'M HERE", "We'Ll see", "DON'T STOP",
             "they'RE", "it'S", "you'Ve", "she'D", "i'M", "can't", "won’t", "rock 'n' roll", "'''", "'tis",
             "".join(chr(c) for c in range(1, 128)), "\x00", "a\x00b", "\x7f\x80",
             "<|im_start|>", "<|im_start|><|im_end|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
             "<|vision_start|><|image_pad|><|vision_end|>What is in this image?",
             "<|image_pad|>" * 20, "<<|im_end|>>", "<|im_end|", "text<|endoftext|>text", " <|endoftext|> ",
             "<think>\n\n</think>\n\n", "e\u0301", "\u00e9", "\u1100\u1161", "caf\u0065\u0301 na\u0131ve",
             "\u0085", "a\u0085b", "a \u0085 b", "\u00a0\u00a0x", "x\u00a0", "\u3000\u3000全角", "\u2028\u2029",
             "\u200b", "a\u200bb", "\ufeffBOM", "1234567890", "12 345", "٣٤", "①②③", "ⅷ",
             "\t\t\t", " \t \t", "   a", "a   ", "a   b", "a\n\n\nb", "a\r\n\r\nb", "a \n b", "  \n  ", "\n  x",
             "!!!", "...", "?!?!", "a.b.c", "e.g.", "(a)", "[1]", "{x}", "--", "—", "–", "…", "«»", "„“", "¿¡",
             "ﬁ", "ﬀ", "ǅ", "ǈ", "İ", "ẞ", "ß", "Ω", "Ω", "Å", "K", "K", "µ", "μ", "ſ", "ﬆ"]
    for a in SPECIALS:
        cases.append("x" + a + "y")
        cases.append(a + " " + a)
    for c in CONTRACTIONS:
        for w in ["we", "WE", "We", "wE"]:
            for cc in {c, c.upper(), c.capitalize(), c.swapcase(), c[0] + c[1:].upper()}:
                cases.append(w + cc)
    return cases


def make_corpus():
    r = random.Random(SEED)
    out = list(dict.fromkeys(fixed_cases()))
    gens = [(english, 330), (contraction_case, 150), (spaces, 150), (long_ws, 100), (digits, 100),
            (special_embed, 160), (long_word, 30), (mixture, 420)]
    for g, n in gens:
        for _ in range(n):
            out.append(g(r))
    for _ in range(140):
        out.append(r.choice(CODE) * r.randint(1, 3))
    for _ in range(120):
        s = CJK
        i = r.randint(0, len(s) - 2)
        out.append(s[i:i + r.randint(1, 40)])
    for _ in range(150):
        s = r.choice(SCRIPTS)
        i = r.randint(0, len(s) - 2)
        out.append(s[i:i + r.randint(1, 60)])
    for _ in range(120):
        out.append("".join(r.choice(EMOJI) + r.choice(["", " ", "x", "\u200d", "\ufe0f"]) for _ in range(r.randint(1, 6))))
    for _ in range(120):
        s = "".join(r.choice(COMBINING) + r.choice(["", "a", " ", "ß"]) for _ in range(r.randint(1, 5)))
        out.append(unicodedata.normalize("NFD", s) if r.random() < 0.5 else s)
    return out


def flags_tokenizer():
    """The tiny tokenizer plus added tokens exercising every flag."""
    with open(TINY, encoding="utf-8") as f:
        t = json.load(f)
    n = max(a["id"] for a in t["added_tokens"]) + 1
    extra = [("<mask>", dict(lstrip=True, rstrip=False, single_word=False, normalized=False, special=True)),
             ("[SEP]", dict(lstrip=False, rstrip=True, single_word=False, normalized=False, special=True)),
             ("<both>", dict(lstrip=True, rstrip=True, single_word=False, normalized=False, special=False)),
             ("cat", dict(lstrip=False, rstrip=False, single_word=True, normalized=False, special=False)),
             ("café", dict(lstrip=False, rstrip=False, single_word=False, normalized=True, special=False)),
             ("<m", dict(lstrip=False, rstrip=False, single_word=False, normalized=False, special=False))]
    for i, (c, fl) in enumerate(extra):
        t["added_tokens"].append(dict(id=n + i, content=c, **fl))
    # The old "a b" string form of merges, to cover both forms.
    t["model"]["merges"] = [" ".join(m) for m in t["model"]["merges"]]
    return t


FLAG_CASES = ["a <mask> b", "a<mask>b", "a   <mask>", "<mask>  x", "x [SEP]  y", "[SEP]\n\nz", "a <both>  b",
              "  <both>  ", "cat", "a cat b", "concat", "cats", "cat_", "(cat)", "cat!", "the cat's",
              "café", "cafe\u0301", "CAFÉ", "un café noir", "<mask><mask>", "<m<mask>", "<mask", "<m", "x<m>y",
              "[SEP][SEP]", " <mask> [SEP] <both> cat café <|im_end|>", "\u3000<mask>", "\u00a0<both>\u00a0",
              "<|im_start|>cat<|im_end|>", "é<mask>é", "1cat", "_cat", "ñcat", "cat1"]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def cmd_corpus():
    os.makedirs(FIX, exist_ok=True)
    corpus = make_corpus()
    write_jsonl(os.path.join(FIX, "corpus.jsonl"), corpus)
    with open(os.path.join(FIX, "flags_tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(flags_tokenizer(), f, ensure_ascii=False)
    write_jsonl(os.path.join(FIX, "flags_cases.jsonl"), FLAG_CASES)
    print(f"{len(corpus)} strings, {sum(len(s.encode()) for s in corpus)} bytes")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def ids_line(ids):
    return json.dumps(list(ids))  # "[1, 2, 3]", what `iris tokenize --jsonl` prints


def cmd_ref(outdir):
    import tokenizers
    os.makedirs(outdir, exist_ok=True)
    print("tokenizers", tokenizers.__version__)
    corpus = read_jsonl(os.path.join(FIX, "corpus.jsonl"))
    qwen = tokenizers.Tokenizer.from_file(QWEN)
    enc = [qwen.encode(s, add_special_tokens=False).ids for s in corpus]
    with open(os.path.join(outdir, "qwen3_ids.jsonl"), "w") as f:
        for ids in enc:
            f.write(ids_line(ids) + "\n")
    # Round trip of every corpus string (HF's decode of its own ids).
    bad = sum(qwen.decode(ids, skip_special_tokens=False) != s for s, ids in zip(corpus, enc))
    print(f"qwen3: {len(corpus)} strings, {sum(map(len, enc))} ids, {bad} that do not round-trip")

    # Decode cases: random ids (specials, ids past the vocab), and slices of
    # real encodings cut anywhere (so multi-byte characters are split).
    r = random.Random(SEED + 1)
    n_vocab = qwen.get_vocab_size(with_added_tokens=True)
    cases = []
    for _ in range(150):
        cases.append([r.randrange(0, n_vocab) for _ in range(r.randint(1, 12))])
    for _ in range(30):
        cases.append([r.randrange(151640, 151936) for _ in range(r.randint(1, 6))] + [r.randrange(0, 1000)])
    for _ in range(220):
        ids = r.choice(enc)
        if not ids:
            continue
        i = r.randrange(0, len(ids))
        cases.append(ids[i:i + r.randint(1, 8)])
    with open(os.path.join(outdir, "qwen3_decode.jsonl"), "w") as f:
        for ids in cases:
            row = {"ids": ids, "text": qwen.decode(ids, skip_special_tokens=False),
                   "text_skip": qwen.decode(ids, skip_special_tokens=True)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

    tiny = tokenizers.Tokenizer.from_file(TINY)
    sub = [s for s in corpus if len(s) <= 300]
    with open(os.path.join(outdir, "tiny_ids.jsonl"), "w") as f:
        for s in sub:
            f.write(json.dumps({"text": s, "ids": tiny.encode(s, add_special_tokens=False).ids}, ensure_ascii=False) + "\n")
    flags = tokenizers.Tokenizer.from_file(os.path.join(FIX, "flags_tokenizer.json"))
    with open(os.path.join(outdir, "flags_ids.jsonl"), "w") as f:
        for s in read_jsonl(os.path.join(FIX, "flags_cases.jsonl")) + sub[:300]:
            f.write(json.dumps({"text": s, "ids": flags.encode(s, add_special_tokens=False).ids}, ensure_ascii=False) + "\n")
    print(f"tiny: {len(sub)} strings; flags tokenizer done")

    # For context only: HF's single-call encode speed on ~10 MB of English.
    import time
    text = " ".join(english(r) for _ in range(60000))
    text = (text + "\n") * max(1, (10 << 20) // len(text.encode()))
    t0 = time.perf_counter()
    qwen.encode(text, add_special_tokens=False)
    dt = time.perf_counter() - t0
    print(f"tokenizers encode of {len(text.encode()) / 1e6:.1f} MB English in one call: {len(text.encode()) / 1e6 / dt:.1f} MB/s")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "corpus":
        cmd_corpus()
    elif len(sys.argv) >= 3 and sys.argv[1] == "ref":
        cmd_ref(sys.argv[2])
    else:
        sys.exit(__doc__)
