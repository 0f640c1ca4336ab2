#!/usr/bin/env python3
"""HF transformers peer: prefill latency/MFU and batch-1 decode speed on the GPU.

The reference point for specstack's CUDA backend: the same model shape (an HF
config.json, random bf16 weights) run through transformers with SDPA attention.

    python3 bench/hf_peer.py --config tests/data/configs/qwen2.5-7b.json \
        --peak-tflops 790 --copy-tbps 3.0

Prints a table, then machine-readable lines:
    hf prefill L=<L> seconds=<s> mfu=<x>      (seconds=nan mfu=nan status=oom on OOM)
    hf decode tok_s=<x> bw_frac=<y>
The FLOP and byte formulas are in prefill_flops() / decode_weight_bytes() and
bench/README-device.md (the C++ benchmarks use the same ones).
"""

import argparse
import inspect
import json
import math
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def prefill_flops(body_params, n_layers, n_heads, head_dim, length, lm_head_params=0, n_logits=1):
    """FLOPs of one causal prefill of `length` tokens (the MFU numerator).

    * Linear layers: 2 FLOPs (multiply + add) per parameter per token, over the
      "body" parameters: everything except the token embedding (a gather, no
      FLOPs) and the LM head. For a MoE model, body_params counts only the
      experts a token is routed to (active parameters).
    * LM head: 2 * lm_head_params per token that gets logits (n_logits; the
      engine and this peer compute logits for the last token only).
    * Attention: per layer and head, Q.K^T and P.V are 2 * L * L * head_dim FLOPs
      each, halved by the causal mask:
          4 * n_layers * (L^2 / 2) * n_heads * head_dim.
      (Exactly L*(L+1)/2 pairs are unmasked; L^2/2 is the usual convention and
      the difference is < 0.01% at L >= 2048. A sliding window is ignored.)
    Norms, RoPE, softmax and activations are not counted.
    """
    linear = 2.0 * body_params * length + 2.0 * lm_head_params * n_logits
    attention = 4.0 * n_layers * (length * length / 2.0) * n_heads * head_dim
    return linear + attention


def decode_weight_bytes(body_params, lm_head_params, bytes_per_param=2):
    """Bytes of weights one batch-1 decode step must read from memory.

    Every body parameter and the whole LM head are read once per token; the
    embedding contributes one row (ignored). The KV cache read (about 0.2% of
    the weights for a 7B model at 576 tokens) is not counted.
    """
    return (body_params + lm_head_params) * bytes_per_param


def parse_lengths(text):
    return [int(x) for x in text.split(",") if x.strip()]


def load_config(path):
    """An HF config.json (our tests/data/configs/*.json) as a transformers config."""
    with open(path) as f:
        fields = json.load(f)
    model_type = fields.pop("model_type")
    return AutoConfig.for_model(model_type, **fields)


def build_model(config):
    """Random bf16 weights built directly on the GPU (a CPU init of 7B params is slow).

    Constructing under `torch.device("cuda")` keeps buffers computed in
    __init__ (RoPE inv_freq) valid, unlike meta + to_empty. Weights are then
    overwritten in place: matrices N(0, 0.02), norm scales 1, biases 0.
    """
    kwargs = dict(attn_implementation="sdpa")
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, **kwargs)
        except TypeError:  # transformers < 4.56 only knows torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, **kwargs)
    model.eval()
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=gen)
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.zero_()
    return model


def count_params(model, config):
    """(body_params, lm_head_params, total_params): see prefill_flops()."""
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = head.data_ptr() == embed.data_ptr()
    total = sum(p.numel() for p in model.parameters())  # shared tensors counted once
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    n_experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    body = total - embed.numel() - (0 if tied else head.numel())
    if experts and n_experts and top_k:  # MoE: only the routed experts run per token
        body -= experts * (1.0 - top_k / n_experts)
    return body, head.numel(), total


def forward_kwargs(model):
    """Compute logits for the last token only, like the engine (name depends on version)."""
    params = inspect.signature(model.forward).parameters
    if "logits_to_keep" in params:
        return {"logits_to_keep": 1}
    if "num_logits_to_keep" in params:
        return {"num_logits_to_keep": 1}
    return {}


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def bench_prefill(model, vocab, length, repeats, logits_kw):
    ids = torch.randint(0, vocab, (1, length), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(length))

    def run():
        return model(input_ids=ids, use_cache=False, **logits_kw).logits

    run()  # warm-up (kernel selection, allocator growth)
    return statistics.median(timed(run)[0] for _ in range(repeats))


def bench_decode(model, vocab, prompt_len, steps, repeats, logits_kw):
    """Seconds for `steps` greedy batch-1 decode steps after a prompt_len prefill (median)."""
    ids = torch.randint(0, vocab, (1, prompt_len), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(1))

    def one(n_steps):
        out = model(input_ids=ids, use_cache=True, **logits_kw)
        cache = out.past_key_values
        token = out.logits[:, -1:].argmax(dim=-1)  # [1, 1]
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n_steps):
            out = model(input_ids=token, past_key_values=cache, use_cache=True, **logits_kw)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(dim=-1)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    one(min(steps, 8))  # warm-up
    return statistics.median(one(steps) for _ in range(repeats))


def fmt(x, spec):
    """format() that also takes None; NaN prints as 'nan' in the field width."""
    return format(math.nan if x is None else x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tests/data/configs/qwen2.5-7b.json")
    ap.add_argument("--lengths", type=parse_lengths, default=[2048, 8192, 16384, 32768])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-prompt", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--peak-tflops", type=float, default=float("nan"),
                    help="bf16 peak (gpu_peak's peak_bf16_tflops); MFU is nan without it")
    ap.add_argument("--copy-tbps", type=float, default=float("nan"),
                    help="copy bandwidth (gpu_peak's copy_tbps); bw_frac is nan without it")
    ap.add_argument("--skip-decode", action="store_true")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("hf_peer: no CUDA device", file=sys.stderr)
        return 1
    config = load_config(args.config)
    t0 = time.perf_counter()
    model = build_model(config)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    body, lm_head, total = count_params(model, config)
    n_layers = config.num_hidden_layers
    n_heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    vocab = config.vocab_size
    logits_kw = forward_kwargs(model)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}")
    print(f"{args.config}: {total / 1e9:.3f}B params ({body / 1e9:.3f}B body, "
          f"{lm_head / 1e6:.1f}M lm_head), attn={model.config._attn_implementation}, "
          f"logits kwarg {logits_kw or 'none (full logits)'}, built in {build_s:.1f}s")
    sys.stdout.flush()

    rows = []
    with torch.inference_mode():
        for length in args.lengths:
            try:
                seconds = bench_prefill(model, vocab, length, args.repeats, logits_kw)
                flops = prefill_flops(body, n_layers, n_heads, head_dim, length, lm_head, 1)
                mfu = flops / seconds / (args.peak_tflops * 1e12)
                rows.append((length, seconds, length / seconds, flops / seconds * 1e-12, mfu, ""))
            except torch.cuda.OutOfMemoryError:
                rows.append((length, math.nan, math.nan, math.nan, math.nan, "oom"))
            torch.cuda.empty_cache()
            r = rows[-1]
            line = f"hf prefill L={length} seconds={fmt(r[1], '.4f')} mfu={fmt(r[4], '.4f')}"
            print(line + (" status=oom" if r[5] else ""), flush=True)

        decode = None
        if not args.skip_decode:
            try:
                seconds = bench_decode(model, vocab, args.decode_prompt, args.decode_steps,
                                       args.repeats, logits_kw)
                tok_s = args.decode_steps / seconds
                bytes_s = decode_weight_bytes(body, lm_head) * tok_s
                decode = (tok_s, bytes_s * 1e-12, bytes_s / (args.copy_tbps * 1e12))
            except torch.cuda.OutOfMemoryError:
                decode = (math.nan, math.nan, math.nan)
            print(f"hf decode tok_s={fmt(decode[0], '.2f')} bw_frac={fmt(decode[2], '.4f')}",
                  flush=True)

    print(f"\n{'prefill L':>10} {'seconds':>10} {'tok/s':>10} {'TFLOP/s':>9} {'MFU':>7}")
    for length, seconds, tok_s, tflops, mfu, status in rows:
        print(f"{length:>10} {fmt(seconds, '10.4f')} {fmt(tok_s, '10.0f')} "
              f"{fmt(tflops, '9.1f')} {fmt(mfu, '7.3f')} {status}")
    if decode:
        print(f"decode (prompt {args.decode_prompt}, {args.decode_steps} steps, batch 1): "
              f"{fmt(decode[0], '.2f')} tok/s, {fmt(decode[1], '.3f')} TB/s of weights, "
              f"{fmt(decode[2], '.3f')} of copy bandwidth")
    print(f"(median of {args.repeats} after 1 warm-up; peak {args.peak_tflops} TFLOP/s, "
          f"copy {args.copy_tbps} TB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
