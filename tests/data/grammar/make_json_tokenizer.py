#!/usr/bin/env python3
"""Writes json-bytes-512/: a 512-token byte-level BPE tokenizer whose merges
were learned on JSON text, for the grammar tests with the 512-vocab golden
models (random weights): ids 0-2 are <unk>, <s>, </s> (bos 1, eos 2, as the
golden configs say), 3-258 the 256 bytes, 259-511 merges. Deterministic:
rerunning it rewrites the same files."""
import json, os, random

def bytes_to_unicode():  # GPT-2's table
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

rng = random.Random(7)
words = ["name", "age", "id", "kind", "tags", "true", "false", "null", "red", "green", "code", "score", "items", "value"]
corpus = []
for _ in range(400):
    obj = {rng.choice(words): rng.choice([rng.randint(-999, 99999), rng.choice(words), None, True, False, [1, 2]]) for _ in range(3)}
    corpus.append(json.dumps(obj, indent=rng.choice([None, 2])))
b2u = bytes_to_unicode()
seqs = [[b2u[b] for b in text.encode()] for text in corpus]
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    vocab[b2u[b]] = len(vocab)
merges = []
while len(vocab) < 512:
    counts = {}
    for s in seqs:
        for a, b in zip(s, s[1:]):
            counts[(a, b)] = counts.get((a, b), 0) + 1
    (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    merges.append(a + " " + b)
    vocab[a + b] = len(vocab)
    for s in seqs:
        i = 0
        while i < len(s) - 1:
            if s[i] == a and s[i + 1] == b:
                s[i:i + 2] = [a + b]
            i += 1
special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
tokenizer = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
}
config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
          "chat_template": "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "json-bytes-512")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "tokenizer.json"), "w") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=1)
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=1)
print(len(vocab), "tokens,", len(merges), "merges; e.g.", [k for k in list(vocab)[259:275]])
