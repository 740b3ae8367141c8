#!/usr/bin/env python3
"""Record llama.cpp's tokenizations of a fixed corpus as the reference for wick's tokenizers.

Usage: python3 tests/scripts/make_tokenizer_refs.py [MODELS_DIR]
(MODELS_DIR defaults to $WICK_MODELS or ./models). Needs `llama-cpp-python` and `gguf` (to write
metadata-only copies of SmolLM2 with other `tokenizer.ggml.pre` values).
Writes tests/data/tokenizer_refs.json, which tests/tokenizer_llamacpp.rs reads.
"""
import ctypes
import json
import os
import sys

import llama_cpp

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

# Other pre-tokenizers, checked on SmolLM2's vocabulary and merges: a copy of its metadata
# (no tensors) with `tokenizer.ggml.pre` replaced.
PRE_VARIANTS = [
    "default", "gpt-2", "llama-bpe", "qwen2", "starcoder", "falcon", "deepseek-llm", "deepseek-coder",
    "deepseek-v3", "poro-chat", "viking", "tekken", "gpt-4o", "bailingmoe", "seed-coder", "chatglm-bpe",
]


# Flag variants: (name, base model, metadata overrides).
FLAG_VARIANTS = [
    ("gemma3_space_prefix_eos", "gemma3", {"tokenizer.ggml.add_space_prefix": True, "tokenizer.ggml.add_eos_token": True}),
    ("smollm2_bos_eos", "smollm2", {"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": True}),
]


def write_variant(src, dest, overrides):
    import gguf

    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dest, r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in overrides:
            continue
        t = f.types[0]
        w.add_key_value(k, f.contents(), t, f.types[1] if t == gguf.GGUFValueType.ARRAY else None)
    for k, v in overrides.items():
        w.add_key_value(k, v, gguf.GGUFValueType.BOOL if isinstance(v, bool) else gguf.GGUFValueType.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

CORPUS = [
    "",
    " ",
    "  ",
    "\n",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space and trailing space ",
    "trailing spaces   ",
    "I'm sure you've heard they'll say it's what we'd do, can't we? DON'T SHOUT, I'LL",
    "The quick brown fox jumps over the lazy dog.\n",
    "multiple\n\nnewlines\n\n\nand\r\nwindows line endings\r\n",
    "tabs\tand\t\ttabs\t",
    "     five spaces before, then    four in the middle",
    "Café naïve résumé façade jalapeño Straße",
    "Ελληνικά και русский язык",
    "日本語のテキストと中文文本，还有한국어。",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "emoji: 😀 🎉 👍🏽 🇫🇷",
    "family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 ZWJ sequences",
    "def add(a, b):\n    return a + b\n\nclass Foo:\n\tdef bar(self):\n\t\tpass\n",
    "for (int i = 0; i < n; ++i) { sum += x[i] * 2; }",
    "fn main() {\n    println!(\"{}\", 1_000_000);\n}\n",
    "1234567890 3.14159 -42 1e10 0x1F",
    "12345678901234567890123456789",
    "Prices: $1,234.56 and €99,99 or ¥10000",
    "Punctuation!!! ??? ... --- *** ### @@@ ;;; ,,,",
    "\"quoted\" 'single' `backtick` (parens) [brackets] {braces} <angles>",
    "http://example.com/path?query=1&b=2#frag",
    "user@example.com #hashtag @mention",
    "UPPER lower MiXeD CamelCase snake_case kebab-case",
    "a\u00a0non-breaking\u2003em-space\u3000ideographic space",
    "zero\u200bwidth\u200djoiner\u200cnon-joiner",
    "combining: e\u0301 a\u0308 n\u0303",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos<eos>",
    "<|endoftext|>after end of text",
    "partial <|im_start and <start_of_turn without closing",
    "<s> </s> <unk> <pad> <mask>",
    "<0x0A> looks like a byte token",
    "\n\n\n\n",
    "            \n        \t  deep indentation",
    "x" * 64,
    "The year 2024 had 366 days; 2025 has 365.",
    "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏ àáâãäåæçèéêëìíîï",
    "Mixed 中文 and English, with emoji 🚀 and numbers 42.",
    "\u2581already has the SentencePiece space marker",
]


# Seeded random strings from a pool that stresses the pre-tokenizer regexes and merges.
POOL = (
    list("abcXYZ019") + list(" \t\n\r") + [" ", "  ", "\u00a0", "\u3000", "\u2009"]
    + list(".,!?'\"-_/()[]{}<>|$+=^~`@#%&*;:") + ["'s", "'LL", "'re", "'t"]
    + list("éüñçßøÆ") + list("日本中文한글") + list("ابجدहिंदी") + ["e\u0301", "\u200d", "\u200b"]
    + ["😀", "🎉", "👍🏽", "🇫🇷", "👨‍👩‍👧"] + ["123", "4567", "3.14"]
    + ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<0x41>", "\u2581"]
)


def random_corpus(n=80, seed=1234):
    import random
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 30))) for _ in range(n)]


CORPUS = CORPUS + random_corpus()


def piece(vocab, tok, special):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 256, 0, special)
    assert 0 <= n <= 256, n
    return buf.raw[:n]


def detokenize(vocab, toks, remove_special, unparse_special):
    arr = (llama_cpp.llama_token * max(1, len(toks)))(*toks)
    size = 64 + 64 * len(toks)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(vocab, arr, len(toks), buf, size, remove_special, unparse_special)
    assert 0 <= n <= size, n
    return buf.raw[:n]


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("WICK_MODELS", "models")
    out = {"llama_cpp_python": llama_cpp.__version__, "corpus": CORPUS, "models": {}}
    import tempfile

    tmp = tempfile.mkdtemp()
    jobs = [(name, file, None) for name, file in MODELS.items()]
    jobs += [("smollm2_pre_" + pre, MODELS["smollm2"], {"tokenizer.ggml.pre": pre}) for pre in PRE_VARIANTS]
    jobs += [(name, MODELS[base], ov) for name, base, ov in FLAG_VARIANTS]
    for name, file, overrides in jobs:
        path = os.path.join(models_dir, file)
        if overrides is not None:
            variant = os.path.join(tmp, name + ".gguf")
            write_variant(path, variant, overrides)
            path = variant
        try:
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        except Exception as e:  # a pre-tokenizer this llama.cpp build does not know
            print("skipping", name, e)
            continue
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        entries = []
        for text in CORPUS:
            raw = text.encode("utf-8")
            plain = llm.tokenize(raw, add_bos=True, special=False)
            special = llm.tokenize(raw, add_bos=True, special=True)
            no_bos = llm.tokenize(raw, add_bos=False, special=False)
            entries.append({
                "text": text,
                "ids": plain,
                "ids_special": special,
                "ids_no_bos": no_bos,
                # llama_detokenize(remove_special=false, unparse_special=false) of `ids`, as a list of bytes
                "detok": list(detokenize(vocab, plain, False, False)),
            })
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        pieces = {}
        # A sample of pieces (token_to_piece special=false): every 97th id plus the first 300.
        sample = list(range(min(300, n_vocab))) + list(range(300, n_vocab, 97)) if overrides is None else []
        for tok in sample:
            pieces[str(tok)] = list(piece(vocab, tok, False))
        eog = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        out["models"][name] = {
            "file": file,
            "overrides": overrides,
            "n_vocab": n_vocab,
            "bos": llama_cpp.llama_vocab_bos(vocab),
            "eos": llama_cpp.llama_vocab_eos(vocab),
            "eot": llama_cpp.llama_vocab_eot(vocab),
            "eog": eog,
            "pieces": pieces,
            "entries": entries,
        }
        del llm
    dest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer_refs.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.normpath(dest))


if __name__ == "__main__":
    main()
