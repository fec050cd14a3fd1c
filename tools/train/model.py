"""The demo model's architecture in PyTorch: a Llama block stack written to
match ferrox's `llama` forward pass term for term (RMS norm, adjacent-pair
RoPE as GGML's normal mode, grouped-query attention, SwiGLU, tied output),
so the trained weights export to GGUF without any reordering."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, dim, layers, heads, kv_heads, ffn, ctx,
                 eps=1e-5, rope_base=10000.0):
        self.vocab, self.dim, self.layers = vocab, dim, layers
        self.heads, self.kv_heads, self.ffn, self.ctx = heads, kv_heads, ffn, ctx
        self.eps, self.rope_base = eps, rope_base
        self.head_dim = dim // heads

    def as_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n, device=None):
    """cos/sin for positions 0..n-1 and pair i of a head: theta = base^(-2i/d)."""
    half = cfg.head_dim // 2
    inv = cfg.rope_base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / cfg.head_dim)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float().to(device), ang.sin().float().to(device)


def rope(x, cos, sin):
    """x: [B, H, T, D]; rotates the pairs (x[2i], x[2i+1])."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, None], sin[None, None]
    out = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.wq = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w_down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, cfg.heads, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, cfg.kv_heads, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, cfg.kv_heads, hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = cfg.heads // cfg.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, cfg.heads * hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        nn.init.normal_(self.tok_embd.weight, std=0.02)
        for blk in self.blocks:
            for lin in (blk.wq, blk.wk, blk.wv, blk.w_gate, blk.w_up):
                nn.init.normal_(lin.weight, std=0.02)
            for lin in (blk.wo, blk.w_down):  # scaled so the residual stream stays bounded
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.layers))

    def forward(self, idx):
        T = idx.shape[1]
        cos, sin = rope_tables(self.cfg, T, idx.device)
        mask = torch.full((T, T), float("-inf"), device=idx.device).triu(1)
        x = self.tok_embd(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.norm(x) @ self.tok_embd.weight.t()  # tied output
