#!/usr/bin/env python3
"""Oracle fixtures for the C++ tokenizer (tests/tokenizer), made with Hugging Face `tokenizers`.

    pip install tokenizers transformers jinja2   # no torch needed
    python3 tools/make_tokenizer_fixtures.py

Writes into tests/data/tokenizer/:
  qwen3_corpus.jsonl      ids of a diverse corpus encoded with assets/qwen3-tokenizer/tokenizer.json
  synthetic_qwen35/       a small BPE trained here with Qwen3.5's pre-tokenizer (the \\p{M} regex),
                          pair-form merges and added tokens exercising lstrip/rstrip/single_word/
                          normalized; plus its oracle ids
  synthetic_features/     a small BPE exercising the other supported components (NFKC, Replace,
                          Prepend, Digits, string Split, ByteLevel with its own regex and prefix
                          space, trim_offsets); plus its oracle ids

  chat_templates.jsonl    conversations rendered by transformers' apply_chat_template(tokenize=False):
                          the real Qwen3 template (system prompts, multi-turn, tools, tool calls and
                          responses, reasoning_content, add_generation_prompt, enable_thinking) and
                          small templates exercising the Jinja constructs chat templates use

Each JSON line of the tokenizer oracles: {"text", "ids"} and, where useful, "offsets" (byte ranges into the UTF-8 text),
"ids_plain" (ids with special tokens not parsed: HF encode_special_tokens=True), "nfc" (the NFC
form of the text when it differs, which is what decode(encode(text)) must give back) and "decoded"
(HF's decode of the ids, only when it is not NFC(text): the synthetic tokenizers strip and prepend).
Everything is deterministic (fixed seeds), so rerunning reproduces the same files.
"""
import json
import os
import random
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
QWEN3 = os.path.join(ROOT, "assets", "qwen3-tokenizer", "tokenizer.json")

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                  r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé façade naïve café résumé coöperate Ångström Øresund Łódź Dvořák",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Українська: Гей, хлопці, не вспію — на ґанку ї є.",
    "Հայերեն: Բարեւ աշխարհ",
    "עברית: שלום עולם, מה שלומך?",
    "العربية: مرحبا بالعالم! كيف حالك؟ ١٢٣٤٥",
    "فارسی: سلام دنیا ۱۲۳",
    "ܣܘܪܝܝܐ: ܫܠܡܐ ܥܠܡܐ",
    "ދިވެހި: ހެލޯ",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं? १२३",
    "বাংলা: হ্যালো বিশ্ব",
    "ਪੰਜਾਬੀ: ਸਤ ਸ੍ਰੀ ਅਕਾਲ ਦੁਨੀਆ",
    "ગુજરાતી: નમસ્તે વિશ્વ",
    "ଓଡ଼ିଆ: ନମସ୍କାର ବିଶ୍ୱ ଶୋ",
    "தமிழ்: வணக்கம் உலகம் ௧௨௩ கொ",
    "తెలుగు: హలో ప్రపంచం",
    "ಕನ್ನಡ: ನಮಸ್ಕಾರ ಜಗತ್ತು ಕೊ",
    "മലയാളം: ഹലോ ലോകം കൊ",
    "සිංහල: හෙලෝ ලෝකය කො",
    "ไทย: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "ລາວ: ສະບາຍດີໂລກ",
    "བོད་ཡིག: བཀྲ་ཤིས་བདེ་ལེགས།",
    "မြန်မာ: မင်္ဂလာပါ ကမ္ဘာ",
    "ქართული: გამარჯობა მსოფლიო",
    "한국어: 안녕하세요 세계! 한글은 조합형 문자입니다.",
    "ᄒᆞᆫ글 옛 한글 자모: ᄀᆞᄅᆞᆷ",
    "አማርኛ: ሰላም ልዑል",
    "ᏣᎳᎩ: ᎣᏏᏲ ᎡᎶᎯ",
    "ᐃᓄᒃᑎᑐᑦ: ᐊᐃᖓᐃ ᓄᓇ",
    "᚛ᚑᚌᚐᚋ᚜ ᚠᚢᚦᚨᚱᚲ",
    "ខ្មែរ: សួស្តីពិភពលោក",
    "ᠮᠣᠩᠭᠣᠯ: ᠰᠠᠢᠨ ᠪᠠᠢᠨ᠎ᠠ ᠤᠤ",
    "日本語: こんにちは世界！カタカナとひらがなと漢字。ｶﾀｶﾅ半角",
    "中文：你好，世界！这是一个测试。繁體中文：這是一個測試。",
    "ꆈꌠꉙ: ꀉꄷ",
    "Tiếng Việt: Xin chào thế giới, tôi yêu tiếng Việt.",
    "ⵜⴰⵎⴰⵣⵉⵖⵜ: ⴰⵣⵓⵍ ⴰⴷⵓⵏⵉⵜ",
    "ߒߞߏ: ߊ߬ ߣߌ߫ ߛߐ߰ߡߊ߬",
    "ꦧꦱꦗꦮ: ꦲꦭꦺꦴ",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = ∫₀^∞ f(t) dt ≈ π·√2 ≠ ∞",
    "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕯𝖔𝖚𝖇𝖑𝖊 𝟘𝟙𝟚",
    "⠓⠑⠇⠇⠕ ⠺⠕⠗⠇⠙ ┌──┬──┐ │░▒▓│ └──┴──┘",
    "𐌲𐌿𐍄𐌹𐍃𐌺 𓀀𓀁𓂀 𒀀𒀁 𐀀𐀁 𝄞𝄢 𠀀𠀁𪚥 𰀀",
    "Roman numerals Ⅻ ⅷ and fractions ½ ¾ ⅞ and superscripts x³ y⁴ and circled ① ⑳",
    "Fullwidth: ＡＢＣ１２３！？ and ideographic space:\u3000end",
]

EMOJI = [
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🏴‍☠️ pirate, 👍🏿 thumbs",
    "🇯🇵🇺🇸🇫🇷🇩🇪 flags and keycaps 1️⃣2️⃣#️⃣ and ❤️‍🔥 ❤ ♥️",
    "🧑‍🤝‍🧑🫱🏼‍🫲🏾😀😃😄😁😆😅🤣😂🙂🙃🫠😉😊😇🥰😍🤩",
    "Mixed: I ❤️ NY! 🎉🎉🎉 100% 🔥🔥",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 tag sequence and skin tones 👋🏻👋🏼👋🏽👋🏾👋🏿",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"Hello, %s!\\n\", \"world\");\n\treturn 0;\n}\n",
    "template <typename T>\nauto add(T a, T b) -> decltype(a + b) { return a+b; } // C++\n",
    "{\"name\": \"fp4serve\", \"version\": [0, 1, 0], \"nested\": {\"a\": null, \"b\": true}}",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%smith%' ORDER BY id DESC;",
    "for i in $(seq 1 10); do echo \"$i\" | grep -E '^[0-9]+$' >/dev/null && echo ok; done",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "x = lambda *args, **kwargs: {k: v for k, v in kwargs.items() if v is not None}",
    "// TODO: fix this!!!\n/* multi\n   line */\nconst a = `template ${literal}`;",
    "if (a&&b||!c) { a <<= 2; b >>= 3; c ^= ~d; } else if (x != y) {}",
    "    \t  mixed indentation\n\t\t\ttabs\n        spaces",
    "https://example.com/path/to/page?query=1&other=two#anchor mailto:someone@example.org",
    "C:\\Users\\name\\Documents\\file.txt and /usr/local/bin/python3.11",
    "0x1F 0b1010 0o777 1e-9 3.14159 -42 +7 1,234,567.89 1.2.3.4 192.168.0.1:8080",
]

NUMBERS = [
    "1234567890", "3.141592653589793238462643383279502884197", "2024-11-30T10:26:00Z",
    "$1,000,000.00 €50 ¥1000 £3.50 ₹100", "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३४५६७८९ ๐๑๒๓๔๕๖๗๘๙",
    "１２３４５ ¹²³ ₁₂₃ ⅠⅡⅢ 〇一二三", "99 bottles of beer on the wall, 99 bottles of beer.",
    "Phone: +1 (555) 123-4567, ext. 89", "1st 2nd 3rd 4th 21st 100th",
]

CONTRACTIONS = [
    "I'm sure you're right, they've said we'll go, it's fine, he'd know, don't worry.",
    "I'M SURE YOU'RE RIGHT, THEY'VE SAID WE'LL GO, IT'S FINE, HE'D KNOW, DON'T WORRY.",
    "I'm I'M i'M I'm You'Re you'rE THEY'Ve they'vE we'LL We'll IT'S it'S HE'D he'D DON'T don'T",
    "rock'n'roll o'clock ma'am y'all 'tis 'twas ’s curly apostrophe’s and ‘quotes’",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ''s '''",
    "Kelvin's long ſ: 'ſ 'K 'K",
]

WHITESPACE = [
    "a  b   c    d     e", "trailing spaces   ", "   leading spaces", "\t\ttabs\tand\ttabs\t",
    "line1\nline2\n\nline4\n\n\n\nline8", "crlf\r\nline\r\n\r\nend\r\n", "cr only\rline\r\r",
    "mixed \n \n\t\n  \r\n  end", "nbsp\u00a0here and\u00a0\u00a0two", "em\u2003space en\u2002space thin\u2009space",
    "line\u2028separator\u2029paragraph", "nel\u0085char", "zero\u200bwidth\u200cnon\u200djoiner",
    "word\u3000ideographic\u3000space", "  \n", "\n", " ", "\t", "\r\n", "\n\n\n", "    ",
    " \u00a0 \u2003 ", "\u180e mongolian vowel separator", "\ufeffBOM at start",
    "soft\u00adhyphen", "rtl\u200fmark\u200eltr", "\x0b vertical tab \x0c form feed \x1c\x1d\x1e\x1f",
    "ctrl\x00null\x01\x02\x7f del", "end with newline\n", "many\n" * 20,
]

NON_NFC = [
    "e\u0301 a\u0300 o\u0302 u\u0308 n\u0303",  # decomposed accents compose
    "\u212b Angstrom sign and \u2126 Ohm sign and \u212a Kelvin sign",  # singletons
    "\u1100\u1161\u11a8 conjoining jamo become 각",
    "q\u0307\u0323 reorder marks d\u0323\u0307",
    "\u0301 combining mark at start",
    "Z\u0351\u0352\u0357\u0310\u030d\u0303a\u0366\u0367\u035bl\u0358\u035cg\u0340o\u0341",  # zalgo
    "ﬁ ligature ﬂ stays in NFC; ² too; ｶ too",
    "\u0b47\u0b3e Oriya two-part vowel and \u0dd9\u0dcf Sinhala",
    "\u00c5\u030a double ring, \u1e0b\u0323 dot order",
    "\u0928\u093c Devanagari nukta (composition exclusion stays decomposed)",
    "\u30ab\u3099 kana voiced mark",
    "\uac00\u11a7 U+11A7 is not a trailing consonant (utf8proc 2.8 wrongly composes it)",
    "\u1100\u1161\u11a7\u11a8 \uac00\u11a8\u11a8",
]

SPECIALS = [
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.<|im_end|>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>",
    "text<|endoftext|>more text<|endoftext|><|endoftext|>",
    "<|im_start|><|im_end|><|im_start|>", "<<|im_start|>>", "<|im_start", "im_start|>", "<|im_start |>",
    "<|IM_START|> is not special", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>return 1",
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>describe",
    "<|object_ref_start|>the cat<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>",
    "<|repo_name|>fp4serve<|file_sep|>src/main.cpp", "<think></think>", "< think >", "<thinking>",
    " <|im_end|> spaces around <|im_end|> ", "\n<|im_end|>\n", "word<|im_end|>word",
]

LONG = [
    "a" * 5000, "ab" * 2500, "abc " * 1200, "x" * 300 + " " + "y" * 300, "1" * 3000,
    " " * 3000, " " * 1000 + "x", "\n" * 1000, "!" * 2000, "ab!" * 1000, "é" * 2000, "中" * 3000,
    "😀" * 800, "Supercalifragilisticexpialidocious" * 60, "\t" * 500 + "tab",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
]


def random_page_texts(rng):
    """One text of random characters from every 256-code-point page that has assigned characters
    in the BMP and the supplementary planes, so every block meets the regex and the vocabulary."""
    texts = []
    for page in range(0, 0x32000 // 256):
        base = page * 256
        chars = [chr(c) for c in range(base, base + 256)
                 if not (0xD800 <= c <= 0xDFFF) and unicodedata.category(chr(c)) != "Cn"]
        if not chars:
            continue
        picked = [rng.choice(chars) for _ in range(rng.randint(8, 24))]
        # Mix in ASCII context so pieces also cross script boundaries.
        for _ in range(rng.randint(0, 4)):
            picked.insert(rng.randrange(len(picked) + 1), rng.choice([" ", "a", "1", ".", "\n", "'s", "  "]))
        texts.append("".join(picked))
    return texts


def random_mixed_texts(rng, count):
    """Random mixtures of words, numbers, punctuation, whitespace, emoji and special tokens."""
    pieces = ["hello", "World", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123", "4.5", "!", "?!", "...",
              "é", "e\u0301", "中文", "日本", "한국", "Привет", "مرحبا", "नमस्ते", "😀", "👨‍👩‍👧", "🇫🇷",
              "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<tool_call>", "{", "}",
              "==", "->", "def", "  return", "_", "__init__", "\u00a0", "\u3000", "ﬁ", "Ω", "\u212b"]
    texts = []
    for _ in range(count):
        n = rng.randint(1, 30)
        texts.append("".join(rng.choice(pieces) for _ in range(n)))
    return texts


def corpus():
    rng = random.Random(20261130)
    handwritten = SCRIPTS + EMOJI + CODE + NUMBERS + CONTRACTIONS + WHITESPACE + NON_NFC + SPECIALS + LONG
    # A paragraph joining many scripts, and the whole hand-written set as one document.
    handwritten.append(" ".join(SCRIPTS[:20]))
    handwritten.append("\n\n".join(SCRIPTS + CODE[:5]))
    return handwritten, random_page_texts(rng) + random_mixed_texts(rng, 400)

# --------------------------------------------------------------------------------------------
# Oracle
# --------------------------------------------------------------------------------------------


def byte_offsets(text, char_offsets):
    """HF's Python binding reports offsets in characters; the C++ API uses UTF-8 bytes."""
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    return [[starts[b], starts[e]] for b, e in char_offsets]


def oracle_lines(tok, texts, with_offsets):
    plain = Tokenizer.from_str(tok.to_str())
    plain.encode_special_tokens = True
    lines = []
    for i, text in enumerate(texts):
        enc = tok.encode(text, add_special_tokens=False)
        line = {"text": text, "ids": enc.ids}
        if with_offsets(i):
            line["offsets"] = byte_offsets(text, enc.offsets)
        ids_plain = plain.encode(text, add_special_tokens=False).ids
        if ids_plain != enc.ids:
            line["ids_plain"] = ids_plain
        nfc = unicodedata.normalize("NFC", text)
        if nfc != text:
            line["nfc"] = nfc
        # Tokenizers that strip, prepend or replace cannot round-trip; record what HF decodes.
        decoded = tok.decode(enc.ids, skip_special_tokens=False)
        if decoded != nfc:
            line["decoded"] = decoded
        lines.append(line)
    return lines


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {os.path.relpath(path, ROOT)}: {len(lines)} lines, {os.path.getsize(path)} bytes")

# --------------------------------------------------------------------------------------------
# Synthetic tokenizers
# --------------------------------------------------------------------------------------------


def train(tok, texts, vocab_size):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def synthetic_qwen35(training):
    """Qwen3.5's pipeline in miniature: NFC, the \\p{M} Split regex, ByteLevel without regex."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    train(tok, training, 1200)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in
                            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.add_tokens([
        AddedToken("<think>", special=False, normalized=False),
        AddedToken("</think>", special=False, normalized=False),
        AddedToken("<mask>", special=True, normalized=False, lstrip=True, rstrip=True),
        AddedToken("[WORD]", special=False, normalized=False, single_word=True),
        AddedToken("ﬁnd", special=False, normalized=True),  # NFC keeps ﬁ; matched after normalizing
        AddedToken("e\u0301t\u00e9", special=False, normalized=True),  # pattern itself gets NFC'd
        AddedToken("<|im_start|>x", special=True, normalized=False),  # longest match wins
    ])
    return tok


def synthetic_features(training):
    """The other supported components: NFKC, Replace, Prepend, Digits, string Split with
    MergedWithNext, ByteLevel with its GPT-2 regex and add_prefix_space, trim_offsets."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.Replace("\t", "    "),
        normalizers.Replace(Regex(r"\d{5,}"), "#####"),
        normalizers.Prepend("~"),
    ])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"!+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\|"), behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    train(tok, training, 900)
    tok.add_special_tokens([AddedToken("<s>", special=True, normalized=False),
                            AddedToken("<pad>", special=True, normalized=False, rstrip=True)])
    tok.add_tokens([AddedToken("hello world", special=False, normalized=True, lstrip=True)])
    return tok


def same_unicode_version(texts, form):
    """Drops texts whose normalization by HF (its own, older Unicode tables) differs from Python's
    unicodedata (Unicode 14, like the utf8proc/PCRE2 of the C++ side): a Unicode-version
    difference, not a tokenizer difference. Returns the texts kept."""
    hf = {"NFC": normalizers.NFC(), "NFKC": normalizers.NFKC()}[form]
    kept = [t for t in texts if hf.normalize_str(t) == unicodedata.normalize(form, t)]
    if len(kept) != len(texts):
        print(f"  {len(texts) - len(kept)} text(s) left out: HF's {form} tables predate Python's")
    return kept


def save_synthetic(name, tok, texts):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")
    tok.save(path, pretty=False)
    print(f"wrote {os.path.relpath(path, ROOT)}: {os.path.getsize(path)} bytes")
    reloaded = Tokenizer.from_file(path)
    write_jsonl(os.path.join(folder, "oracle.jsonl"), oracle_lines(reloaded, texts, lambda i: True))


# --------------------------------------------------------------------------------------------
# Chat templates
# --------------------------------------------------------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web ünïcode «quotes» and \"escapes\"\n",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer",
                   "default": 5}, "ratio": {"type": "number", "default": 0.25}}, "required": ["query"]}}}


def conversations():
    """(name, messages, tools) triples covering the branches of the Qwen3 template."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
    call_str = {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"fp4\"}"}}
    bare_call = {"name": "get_weather", "arguments": {"city": "東京"}}
    return [
        ("single user", [{"role": "user", "content": "Hello!"}], None),
        ("system and user", [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": "What is 2+2?"}], None),
        ("multi-turn", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke."}], None),
        ("assistant last", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}], None),
        ("reasoning_content", [{"role": "user", "content": "2+2?"},
                               {"role": "assistant", "content": "4", "reasoning_content": "\nAdd them.\n"},
                               {"role": "user", "content": "3+3?"},
                               {"role": "assistant", "content": "6", "reasoning_content": "Add again."}], None),
        ("inline think", [{"role": "user", "content": "Q1"},
                          {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nA1"},
                          {"role": "user", "content": "Q2"},
                          {"role": "assistant", "content": "<think>second</think>A2"}], None),
        ("old reasoning dropped", [{"role": "user", "content": "Q1"},
                                   {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
                                   {"role": "user", "content": "Q2"}], None),
        ("reasoning alias", [{"role": "user", "content": "Q"},
                             {"role": "assistant", "content": "A", "reasoning": "via the reasoning field"}], None),
        ("thinking alias", [{"role": "user", "content": "Q"},
                            {"role": "assistant", "content": "A", "thinking": "via the thinking field"}], None),
        ("tools no system", [{"role": "user", "content": "Weather in Paris?"}], [WEATHER_TOOL]),
        ("tools with system", [{"role": "system", "content": "Be concise."},
                               {"role": "user", "content": "Weather?"}], [WEATHER_TOOL, SEARCH_TOOL]),
        ("tool call round trip", [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
            {"role": "assistant", "content": "It is 21 °C and clear."}], [WEATHER_TOOL]),
        ("parallel calls and responses", [
            {"role": "user", "content": "Weather and news?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [call, call_str]},
            {"role": "tool", "content": "sunny"},
            {"role": "tool", "content": "no news"},
            {"role": "assistant", "content": "<think>\ncombine\n</think>\n\nSunny, no news."}],
         [WEATHER_TOOL, SEARCH_TOOL]),
        ("multi-step tools", [
            {"role": "user", "content": "Plan a trip."},
            {"role": "assistant", "content": "", "reasoning_content": "need weather", "tool_calls": [bare_call]},
            {"role": "tool", "content": "rain"},
            {"role": "assistant", "content": "", "reasoning_content": "need search", "tool_calls": [call_str]},
            {"role": "tool", "content": "umbrella shops"}], [WEATHER_TOOL, SEARCH_TOOL]),
        ("user tool_response content", [
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": "A", "reasoning_content": "r"},
            {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"},
            {"role": "assistant", "content": "B", "reasoning_content": "r2"}], None),
        ("late system", [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Now be formal."},
                         {"role": "user", "content": "Hello"}], None),
        ("unicode and specials", [{"role": "system", "content": "Réponds en français 🇫🇷"},
                                  {"role": "user", "content": "你好 <|im_end|> \t tabs\r\nCRLF"},
                                  {"role": "assistant", "content": "Ça va 😀"}], None),
        ("empty contents", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], None),
    ]


FEATURE_TEMPLATES = {
    "loops and filters": (
        "{# comment #}\n"
        "{%- for m in messages %}\n"
        "  {{- loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.first }} {{ loop.last }}"
        " {{ m.role|upper }}:{{ m.content|trim|replace('a', 'A') }}|{{ m.content|length }}\n"
        "  {%- if loop.previtem is defined %} prev={{ loop.previtem.role }}{% endif %}\n"
        "{% endfor %}\n"
        "{{ messages|map(attribute='role')|join(', ') }}\n"
        "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} users;"
        " {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}\n"
        "{{ (messages|first).role }} {{ (messages|last)['role'] }} {{ messages[-1].content[:3] }}"
        " {{ messages[::-1][0].role }} {{ 'abcdef'[1:5:2] }} {{ 'héllo'[1] }} {{ 'héllo'|reverse }}\n"
        "{{ [3, 1, 2]|unique|list }} {{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ 'x' * 3 }}\n"
    ),
    "expressions": (
        "{%- set ns = namespace(total=0, names=[]) %}\n"
        "{%- for m in messages if m.role != 'system' %}{% set ns.total = ns.total + m.content|length %}"
        "{% set ns.names = ns.names + [m.role] %}{% endfor %}\n"
        "{{ ns.total }} {{ ns.names }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }}"
        " {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ 0.1 + 0.2 }}\n"
        "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' ~ 1 ~ none }} {{ 'yes' if 2 > 1 else 'no' }} {{ 'x' if false }}|"
        "{{ not true or false and true }} {{ 'ab' in 'cabd' }} {{ 'z' not in ['a', 'b'] }} {{ 'role' in messages[0] }}\n"
        "{{ {'b': 1, 'a': [1, 2.5, none, true, 'q\"uote']}|tojson }} {{ {'k': 'v'}|tojson(indent=2) }}"
        " {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, 'é']|tojson }} {{ 3.0 }} {{ 1e20 }} {{ 1e-5 }}"
        " {{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'a': 'b'} }}\n"
        "{{ 'a,b,,c'.split(',') }} {{ '  x  y '.split() }} {{ 'a-b-c'.split('-', 1) }} {{ '--x--'.strip('-') }}"
        " {{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}"
        " {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a.b.c'.replace('.', '/') }}"
        " {{ 'banana'.count('a') }} {{ 'banana'.find('n') }} {{ '-'.join(['x', 'y']) }}"
        " {{ 'a b c'.rsplit(' ', 1) }} {{ 'x\\ny\\r\\nz'.splitlines() }} {{ 'pre-body'.removeprefix('pre-') }}"
        " {{ 'abcabc'.rfind('b') }} {{ 'été'.upper() }} {{ 'ÉTÉ'|lower }} {{ 'x'.isdigit() }} {{ '42'.isdigit() }}\n"
        "{{ '42'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ 2.567|round(2) }} {{ -3|abs }} {{ 3|string ~ '!' }}"
        " {{ undefined_thing|default('dflt') }} {{ ''|default('empty', true) }} {{ messages[0].missing is defined }}"
        " {{ none is none }} {{ 1 is number }} {{ 'a' is string }} {{ messages is sequence }} {{ messages[0] is mapping }}"
        " {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ true is true }} {{ 0 is false }}\n"
        "{% for k, v in {'one': 1, 'two': 2}|items %}{{ k }}={{ v }};{% endfor %}"
        "{% for k, v in messages[0].items() %}{{ k }}:{{ v }};{% endfor %}"
        "{{ messages[0].get('role') }} {{ messages[0].get('nope', 'fallback') }} {{ messages[0].keys()|list }}\n"
    ),
    "control and whitespace": (
        "{% macro greet(name, punct='!') -%}\n"
        "    Hello {{ name }}{{ punct }}\n"
        "{%- endmacro %}\n"
        "{{ greet('world') }} {{ greet('you', punct='?') }}\n"
        "{% set block %}captured {{ messages|length }}{% endset %}[{{ block }}]\n"
        "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% elif i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}\n"
        "{% for x in [] %}never{% else %}empty loop{% endfor %}\n"
        "{% for m in messages %}{{ loop.cycle('odd', 'even') }} {% endfor %}\n"
        "    {% if true %}\n"
        "    indented text kept\n"
        "    {% endif %}\n"
        "    {%+ if true %}plus keeps indent{% endif %}\n"
        "a   {%- if true -%}   b   {%- endif -%}   c\n"
        "{% raw %}{{ not rendered }} {% if %}{% endraw %}\n"
        "{%- set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}x stays {{ x }}\n"
        "{% set a, b = 1, 'two' %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t|length }} {{ [1, [2, 3]]|tojson }}\n"
        "{{ messages|map(attribute='content')|map('trim')|join('+') }}\n"
        "{% generation %}generated part{% endgeneration %}\n"
        "{{ 'tab\\t' }}{{ \"dq 'sq'\" }} {{ 'line\\nbreak' }} \\u00e9 {{ '\\u00e9\\x41' }}\n"
        "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ add_generation_prompt }}|{{ tools is none }}\n"
    ),
    "scoping": (
        "{% for i in range(3) %}{% if i == 0 %}{% set x = 1 %}{% endif %}[{{ x }}]{% endfor %}\n"
        "{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}\n"
        "{% for a in [[1, 2], [3, 4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}\n"
        "{{ 'abc' < 'abd' }} {{ none == false }} {{ 0 == false }} {{ {} is mapping }} {{ 1 ~ 2.0 }} {{ 1e16 }}\n"
        "{% for m in messages %}{% if m.role == 'user' %}{% set last = m.content %}{% endif %}{% endfor %}[{{ last }}]\n"
    ),
    "raise": "{% if messages|length > 1 %}{{ raise_exception('Only one message is supported') }}{% endif %}ok",
}


def chat_template_lines():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(QWEN3))
    lines = []
    for name, messages, tools in conversations():
        for gen, kwargs in [(False, {}), (True, {}), (True, {"enable_thinking": False}), (True, {"enable_thinking": True})]:
            rendered = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen, **kwargs)
            lines.append({"name": name, "template": "qwen3", "messages": messages, "tools": tools,
                          "add_generation_prompt": gen, "kwargs": kwargs, "rendered": rendered})
    short = [{"role": "system", "content": "  Sys  "}, {"role": "user", "content": "banana split"},
             {"role": "assistant", "content": "a reply"}]
    for name, source in FEATURE_TEMPLATES.items():
        for messages in (short, short[1:2]):
            line = {"name": name, "template_source": source, "messages": messages, "tools": None,
                    "add_generation_prompt": True, "kwargs": {}}
            try:
                line["rendered"] = tok.apply_chat_template(messages, chat_template=source, tokenize=False,
                                                           add_generation_prompt=True)
            except Exception as e:  # the template raised: the C++ side must fail too
                line["error"] = str(e)
            lines.append(line)
    return lines


def main():
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}, Python unicodedata {unicodedata.unidata_version}")
    os.makedirs(OUT, exist_ok=True)
    handwritten, generated = corpus()
    qwen3 = Tokenizer.from_file(QWEN3)
    texts = same_unicode_version(handwritten + generated, "NFC")
    lines = oracle_lines(qwen3, texts, lambda i: True)
    # HF's own round trip must hold, or the fixture would test something impossible.
    for line in lines:
        if "decoded" in line:
            sys.exit(f"HF round trip differs for {line['text']!r}")
    write_jsonl(os.path.join(OUT, "qwen3_corpus.jsonl"), lines)

    training = SCRIPTS + CODE + CONTRACTIONS + NUMBERS + EMOJI + WHITESPACE + generated[:300]
    small = handwritten[:120] + generated[::5] + [
        "<mask> masked  <mask>  twice", "a[WORD]b [WORD] x[WORD] [WORD]!", "ﬁnd ﬁnding find",
        "ét\u00e9 e\u0301te\u0301 été", "<|im_start|>x<|im_start|>y", "no<mask>space",
        "12345678 and 1234 and 99999", "tab\tindent-dash-words, commas; semis!!! bangs|pipes||",
        "  hello world and hello world", "<pad>   padded <s>start", "ﬀ ① ＡＢＣ ㍿",
    ]
    save_synthetic("synthetic_qwen35", synthetic_qwen35(training), small)
    save_synthetic("synthetic_features", synthetic_features(training), same_unicode_version(small, "NFKC"))
    write_jsonl(os.path.join(OUT, "chat_templates.jsonl"), chat_template_lines())


if __name__ == "__main__":
    main()
