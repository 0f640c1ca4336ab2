#!/usr/bin/env python3
"""Writes the GGUF test models of tests/data/gguf from tests/data/golden (run once; README.md).

Usage: LLAMA_CPP=/path/to/llama.cpp python3 make_gguf.py OUT_DIR
       LLAMA_CPP=/path/to/llama.cpp python3 make_gguf.py dequantize IN.gguf OUT.f32.gguf
Needs numpy and llama.cpp's gguf-py (imported from $LLAMA_CPP/gguf-py). It writes F32/F16
GGUF files the way convert_hf_to_gguf.py lays them out (same key and tensor names, llama's
q/k row permutation, llama3 rope as rope_freqs.weight, stacked experts); quantized files are
then made from the F32 ones by llama.cpp's llama-quantize (see README.md).
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.environ["LLAMA_CPP"], "gguf-py"))
import gguf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "golden", "models")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=np.float32).reshape(e["shape"]).copy()
    return out


def permute(w, n_head, n_head_kv):  # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def rope_factors(cfg, rope, head_dim):  # convert_hf_to_gguf.py LlamaModel.generate_extra_tensors
    base = rope.get("rope_theta", 10000.0)
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
}


def synthetic_vocab(n):
    """An SPM-style vocab for the random models (llama.cpp needs one to load a file)."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens = tokens[:n]
    types = types[:n]
    while len(tokens) < n:
        tokens.append("\u2581t%d" % len(tokens))
        types.append(1)
    return {"model": "llama", "pre": "default", "tokens": tokens, "types": types,
            "scores": [-float(i) for i in range(n)], "bos": 1, "eos": 2, "unk": 0}


def spm_vocab_from_tokenizer_json(folder):
    """tokenizer.json (SentencePiece BPE with byte fallback) as GGUF "llama" vocab metadata.
    Real files carry SentencePiece scores; HF derives its merges from them (highest score
    first), so score(piece) = -(rank of the first merge that makes it) orders them the same."""
    tj = json.load(open(os.path.join(folder, "tokenizer.json")))
    tc = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    vocab = tj["model"]["vocab"]
    n = max(vocab.values()) + 1
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    rank = {}
    for r, m in enumerate(tj["model"]["merges"]):
        a, b = m.split(" ") if isinstance(m, str) else m
        rank.setdefault(a + b, r)
    scores = [-float(rank.get(t, len(rank) + i)) for i, t in enumerate(tokens)]
    types = [1] * n
    for i, t in enumerate(tokens):
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types[i] = 6
    special = {}
    for a in tj["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
        special[a["content"]] = a["id"]
    unk = tj["model"].get("unk_token")
    if unk is not None:
        types[vocab[unk]] = 2
    def tok_id(key):
        v = tc.get(key)
        if isinstance(v, dict):
            v = v["content"]
        return vocab.get(v, special.get(v)) if v else None
    return {"model": "llama", "pre": "default", "tokens": tokens, "types": types, "scores": scores,
            "bos": tok_id("bos_token"), "eos": tok_id("eos_token"),
            "unk": vocab.get(unk) if unk else None, "add_bos": tc.get("add_bos_token", True),
            "chat_template": tc.get("chat_template")}


def write_model(out_path, cfg, weights, arch, ftype, vocab):
    w = gguf.GGUFWriter(out_path, arch)
    hidden, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or hidden // n_head
    rope = cfg.get("rope_parameters") or {"rope_theta": cfg.get("rope_theta", 10000.0)}
    w.add_name(cfg.get("_name", "test"))
    w.add_uint32(f"{arch}.block_count", cfg["num_hidden_layers"])
    w.add_uint32(f"{arch}.context_length", cfg["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", hidden)
    w.add_uint32(f"{arch}.feed_forward_length", cfg.get("intermediate_size", 0))
    w.add_uint32(f"{arch}.attention.head_count", n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", n_kv)
    w.add_float32(f"{arch}.rope.freq_base", rope.get("rope_theta", 10000.0))
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    if cfg.get("head_dim") and cfg["head_dim"] != hidden // n_head:
        w.add_uint32(f"{arch}.attention.key_length", head_dim)
        w.add_uint32(f"{arch}.attention.value_length", head_dim)
    if cfg.get("sliding_window"):
        w.add_uint32(f"{arch}.attention.sliding_window", cfg["sliding_window"])
    if arch == "qwen3moe":
        w.add_uint32(f"{arch}.expert_count", cfg["num_experts"])
        w.add_uint32(f"{arch}.expert_used_count", cfg["num_experts_per_tok"])
        w.add_uint32(f"{arch}.expert_feed_forward_length", cfg["moe_intermediate_size"])
    w.add_uint32(f"{arch}.vocab_size", cfg["vocab_size"])
    w.add_uint32("general.file_type", 0 if ftype == "f32" else 1)
    w.add_tokenizer_model(vocab["model"])
    w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    w.add_token_scores(vocab["scores"])
    w.add_token_types(vocab["types"])
    for key, fn in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                    ("unk", w.add_unk_token_id)):
        if vocab.get(key) is not None:
            fn(vocab[key])
    if "add_bos" in vocab:
        w.add_add_bos_token(bool(vocab["add_bos"]))
    if vocab.get("chat_template"):
        w.add_chat_template(vocab["chat_template"])

    def put(name, t):
        t = t.astype(np.float32)
        if ftype == "f16" and t.ndim >= 2 and name != "token_embd.weight" or (
                ftype == "f16" and name == "token_embd.weight"):
            t = t.astype(np.float16)
        w.add_tensor(name, t)

    llama = arch == "llama"
    if rope.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", rope_factors(cfg, rope, head_dim))
    put("token_embd.weight", weights.get("model.embed_tokens.weight", weights.get("lm_head.weight")))
    put("output_norm.weight", weights["model.norm.weight"])
    if not cfg.get("tie_word_embeddings"):
        put("output.weight", weights["lm_head.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        experts = {}
        for name, t in weights.items():
            if not name.startswith(p):
                continue
            rest = name[len(p):]
            if rest.startswith("mlp.experts."):
                _, _, e, proj, _ = rest.split(".")
                experts.setdefault(proj, {})[int(e)] = t
                continue
            if llama and rest.startswith("self_attn.q_proj"):
                t = permute(t, n_head, n_head)
            if llama and rest.startswith("self_attn.k_proj"):
                t = permute(t, n_head, n_kv)
            put(f"blk.{l}.{LAYER_NAMES[rest]}", t)
        for proj, by_e in experts.items():
            stacked = np.stack([by_e[e] for e in range(len(by_e))])
            put(f"blk.{l}.ffn_{proj[:-5]}_exps.weight", stacked)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
        "qwen3_moe": "qwen3moe"}


def golden(name, out_dir, ftype):
    folder = os.path.join(GOLDEN, name)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg["_name"] = name
    weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        vocab = spm_vocab_from_tokenizer_json(folder)
    else:
        vocab = synthetic_vocab(cfg["vocab_size"])
    if "rope_theta" not in cfg and "rope_parameters" not in cfg:
        cfg["rope_theta"] = 10000.0
    path = os.path.join(out_dir, f"{name}.{ftype}.gguf")
    write_model(path, cfg, weights, ARCH[cfg["model_type"]], ftype, vocab)
    print("wrote", path)


def llama_k256(out_dir):
    """A random llama whose rows are multiples of 256, so llama-quantize can use K-quants."""
    cfg = {"_name": "llama-k256", "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 512,
           "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False}
    rng = np.random.default_rng(1234)
    hd = 64
    def mat(r, c):
        return rng.normal(0, 0.08, (r, c)).astype(np.float32)
    def norm(n):
        return (1.0 + rng.normal(0, 0.05, n)).astype(np.float32)
    w = {"model.embed_tokens.weight": mat(512, 256), "lm_head.weight": mat(512, 256),
         "model.norm.weight": norm(256)}
    for l in range(2):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(256)
        w[p + "post_attention_layernorm.weight"] = norm(256)
        w[p + "self_attn.q_proj.weight"] = mat(4 * hd, 256)
        w[p + "self_attn.k_proj.weight"] = mat(2 * hd, 256)
        w[p + "self_attn.v_proj.weight"] = mat(2 * hd, 256)
        w[p + "self_attn.o_proj.weight"] = mat(256, 4 * hd)
        w[p + "mlp.gate_proj.weight"] = mat(512, 256)
        w[p + "mlp.up_proj.weight"] = mat(512, 256)
        w[p + "mlp.down_proj.weight"] = mat(256, 512)
    path = os.path.join(out_dir, "llama-k256.f32.gguf")
    write_model(path, cfg, w, "llama", "f32", synthetic_vocab(512))
    print("wrote", path)


def dequantize_file(src, dst):
    """Rewrites a quantized GGUF with every tensor dequantized to F32 by gguf-py's reference
    dequantizer, keeping all metadata: llama.cpp's f32 logits on it are the logits of exactly
    the dequantized weights, without llama.cpp's activation quantization."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"]
    w = gguf.GGUFWriter(dst, bytes(arch.parts[arch.data[0]]).decode())
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                val = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, val)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)
    w.add_uint32("general.file_type", 0)
    for t in r.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        w.add_tensor(t.name, np.asarray(values, dtype=np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if sys.argv[1] == "dequantize":
        dequantize_file(sys.argv[2], sys.argv[3])
        sys.exit(0)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in ["llama-gqa", "llama3-rope", "mistral-swa", "qwen2", "qwen3", "qwen3-moe",
                 "tinystories-656k"]:
        golden(name, out, "f32")
        golden(name, out, "f16")
    llama_k256(out)
