#!/usr/bin/python3
"""Writes a model trained by train.py as a GGUF file ferrox (and llama.cpp)
loads as a `llama` model with a SentencePiece vocabulary and a ChatML
chat template. Development only.

    /usr/bin/python3 tools/train/export_gguf.py RUN_DIR OUT.gguf [--type f32|f16|q8_0]

Matrices are stored as PyTorch keeps them ([out][in], row-major), which is
GGUF's [in, out]; norms stay F32. Q8_0 is blocks of 32 weights with one
F16 scale, d = max|x| / 127, q = round(x / d) half away from zero.
"""
import argparse
import os
import struct
import sys

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")

GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
# tokenizer.ggml.token_type values
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER, TT_BYTE = 1, 2, 3, 4, 6
ALIGN = 32


def s(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, typ, value):
        if typ == T_STR:
            body = s(value)
        elif typ == T_ARR:
            etyp, items = value
            body = struct.pack("<IQ", etyp, len(items))
            if etyp == T_STR:
                body += b"".join(s(v) for v in items)
            else:
                body += np.asarray(items, dtype={T_F32: "<f4", T_I32: "<i4", T_U32: "<u4"}[etyp]).tobytes()
        else:
            body = struct.pack({T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[typ], value)
        self.kv.append(s(key) + struct.pack("<I", typ) + body)

    def tensor(self, name, arr, typ):
        """arr: float32 numpy array in PyTorch's shape; GGUF dims are reversed."""
        data = encode(arr.astype(np.float32), typ)
        self.tensors.append((name, list(reversed(arr.shape)), typ, data))

    def write(self, path):
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)) + b"".join(self.kv)
        infos, off = b"", 0
        for name, dims, typ, data in self.tensors:
            infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            infos += struct.pack("<IQ", typ, off)
            off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        blob = head + infos
        blob += b"\0" * (-len(blob) % ALIGN)
        with open(path, "wb") as f:
            f.write(blob)
            for _, _, _, data in self.tensors:
                f.write(data + b"\0" * (-len(data) % ALIGN))


def encode(a, typ):
    if typ == GGML_F32:
        return a.astype("<f4").tobytes()
    if typ == GGML_F16:
        return a.astype("<f2").tobytes()
    assert typ == GGML_Q8_0 and a.shape[-1] % 32 == 0
    blocks = a.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / 127.0).astype(np.float32)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0).astype(np.float32)
    x = blocks * inv[:, None]
    q = (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int8)
    out = np.empty(len(blocks), dtype=[("d", "<f2"), ("q", "i1", 32)])
    out["d"] = d.astype("<f2")
    out["q"] = q
    return out.tobytes()


def vocab_arrays(sp):
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        tokens.append(piece)
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(TT_UNKNOWN)
        elif sp.is_control(i) or piece in ("<|im_start|>", "<|im_end|>"):
            types.append(TT_CONTROL)
        elif sp.is_byte(i):
            types.append(TT_BYTE)
        else:
            types.append(TT_NORMAL)
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16", "q8_0"], default="f16")
    ap.add_argument("--name", default="ferrox npc-tiny")
    a = ap.parse_args()
    ck = torch.load(os.path.join(a.run, "model.pt"), map_location="cpu")
    cfg = Config(**{k: v for k, v in ck["config"].items() if k != "head_dim"})
    st = {k: v.float().numpy() for k, v in ck["state"].items()}
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.run, "tokenizer.model"))
    mat = {"f32": GGML_F32, "f16": GGML_F16, "q8_0": GGML_Q8_0}[a.type]

    w = Writer()
    w.add("general.architecture", T_STR, "llama")
    w.add("general.name", T_STR, a.name)
    w.add("general.license", T_STR, "MIT")
    w.add("general.alignment", T_U32, ALIGN)
    w.add("llama.context_length", T_U32, cfg.ctx)
    w.add("llama.embedding_length", T_U32, cfg.dim)
    w.add("llama.block_count", T_U32, cfg.layers)
    w.add("llama.feed_forward_length", T_U32, cfg.ffn)
    w.add("llama.attention.head_count", T_U32, cfg.heads)
    w.add("llama.attention.head_count_kv", T_U32, cfg.kv_heads)
    w.add("llama.rope.dimension_count", T_U32, cfg.head_dim)
    w.add("llama.rope.freq_base", T_F32, cfg.rope_base)
    w.add("llama.attention.layer_norm_rms_epsilon", T_F32, cfg.eps)
    w.add("llama.vocab_size", T_U32, cfg.vocab)
    tokens, scores, types = vocab_arrays(sp)
    w.add("tokenizer.ggml.model", T_STR, "llama")
    w.add("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens))
    w.add("tokenizer.ggml.scores", T_ARR, (T_F32, scores))
    w.add("tokenizer.ggml.token_type", T_ARR, (T_I32, types))
    w.add("tokenizer.ggml.bos_token_id", T_U32, sp.bos_id())
    w.add("tokenizer.ggml.eos_token_id", T_U32, sp.piece_to_id("<|im_end|>"))
    w.add("tokenizer.ggml.unknown_token_id", T_U32, sp.unk_id())
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    w.add("tokenizer.ggml.add_eos_token", T_BOOL, False)
    w.add("tokenizer.ggml.add_space_prefix", T_BOOL, False)
    w.add("tokenizer.chat_template", T_STR, CHATML)

    w.tensor("token_embd.weight", st["tok_embd.weight"], mat)
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        for src, dst in (("attn_norm", "attn_norm"), ("ffn_norm", "ffn_norm")):
            w.tensor(f"blk.{i}.{dst}.weight", st[p + src + ".weight"], GGML_F32)
        for src, dst in (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("wo", "attn_output"),
                         ("w_gate", "ffn_gate"), ("w_up", "ffn_up"), ("w_down", "ffn_down")):
            w.tensor(f"blk.{i}.{dst}.weight", st[p + src + ".weight"], mat)
    w.tensor("output_norm.weight", st["norm.weight"], GGML_F32)
    w.write(a.out)
    print(f"{a.out}: {os.path.getsize(a.out)} bytes, {a.type}, step {ck['step']}")


if __name__ == "__main__":
    main()
