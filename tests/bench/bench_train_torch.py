#!/usr/bin/env python3
"""PyTorch reference for tests/bench/bench_train_vs_torch.sh: trains the same GPT as capplan-train
(pre-norm LayerNorm blocks, causal multi-head attention, GELU (tanh) MLP, linear layers without
bias, learned positions, tied LM head, AdamW, fp32) on random tokens and prints tokens/s as one
JSON line. Not a test: it needs python3-torch, which only the benchmark script installs."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (Debian 12 ships 1.13)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, d, heads, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x, self.mask[:t, :t])
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt(a.layers, a.hidden, a.heads, a.vocab, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq))
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq))
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    steady = times[a.warmup:] or times
    tokens = a.batch * a.seq
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": a.threads,
                      "tokens_per_s": tokens * len(steady) / sum(steady),
                      "blas": loaded_blas()}))


def loaded_blas():
    """Which BLAS the process really mapped (Debian's torch calls libblas.so.3, whose
    alternative may be OpenBLAS or the slow reference BLAS)."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return "unknown"
    for name in ("openblas", "mkl", "blis", "atlas"):
        if name in maps:
            return name
    return "reference" if "libblas" in maps else "unknown"


if __name__ == "__main__":
    main()
