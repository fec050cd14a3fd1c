#!/usr/bin/python3
"""Turns a tiktoken rank file (one "BASE64 RANK" per line, as Qwen ships
qwen.tiktoken) into a vocabulary-only GGUF that ferrox and llama.cpp load
as a byte-level BPE vocabulary. Development only, standard library only:
it lets the grammar and tokenizer benchmarks run on a real 150k vocabulary
that is too large to vendor.

    tools/tiktoken-vocab.py qwen.tiktoken OUT.gguf [--pre qwen2] [--qwen-specials]

Tokens are stored as GPT-2's byte-to-unicode strings; merges are recovered
from the ranks: a token of rank r is what byte-pair encoding of its own
bytes yields using only the tokens below r, and its merge is the last pair
that joins. --qwen-specials appends Qwen 2.5 / 3's added tokens after the
ranks (ids 151643-151668 for qwen.tiktoken).
"""
import argparse
import base64
import struct

T_U32, T_STR, T_ARR, T_I32 = 4, 8, 9, 5
TT_NORMAL, TT_CONTROL, TT_USER = 1, 3, 4

# Qwen 2.5 / 3's added tokens, in id order after the 151,643 ranks; the
# <|...|> ones are special (control), the others plain added text.
QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
    "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]


def byte_to_unicode():
    """GPT-2's table: printable bytes map to themselves, the rest to 256+."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def last_merge(ranks, token, rank):
    """BPE of token's bytes with ranks below `rank`; returns the final pair."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return None
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts if len(parts) == 2 else None


def gguf_str(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, value):
    out = gguf_str(key) + struct.pack("<I", typ)
    if typ == T_STR:
        return out + gguf_str(value)
    if typ == T_U32:
        return out + struct.pack("<I", value)
    etyp, items = value
    out += struct.pack("<IQ", etyp, len(items))
    if etyp == T_STR:
        return out + b"".join(gguf_str(v) for v in items)
    return out + b"".join(struct.pack("<i", v) for v in items)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tiktoken")
    ap.add_argument("out")
    ap.add_argument("--pre", default="qwen2")
    ap.add_argument("--qwen-specials", action="store_true")
    args = ap.parse_args()

    ranks = {}
    with open(args.tiktoken, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    by_rank = sorted(ranks.items(), key=lambda kv_: kv_[1])
    if [r for _, r in by_rank] != list(range(len(by_rank))):
        raise SystemExit("ranks are not 0..n-1")

    u = byte_to_unicode()
    text = lambda b: "".join(u[x] for x in b)  # noqa: E731
    tokens = [text(t) for t, _ in by_rank]
    types = [TT_NORMAL] * len(tokens)
    merges = []
    for tok, rank in by_rank:
        if len(tok) < 2:
            continue
        pair = last_merge(ranks, tok, rank)
        if pair is None:
            raise SystemExit("rank %d has no merge below it" % rank)
        merges.append(text(pair[0]) + " " + text(pair[1]))
    eos = None
    if args.qwen_specials:
        for sp in QWEN_SPECIALS:
            tokens.append(sp)
            types.append(TT_CONTROL if sp.startswith("<|") else TT_USER)
        eos = len(by_rank)  # <|endoftext|>

    meta = [
        kv("general.architecture", T_STR, "qwen2"),
        kv("general.name", T_STR, "vocabulary from " + args.tiktoken.split("/")[-1]),
        kv("tokenizer.ggml.model", T_STR, "gpt2"),
        kv("tokenizer.ggml.pre", T_STR, args.pre),
        kv("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
        kv("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
        kv("tokenizer.ggml.merges", T_ARR, (T_STR, merges)),
    ]
    if eos is not None:
        meta.append(kv("tokenizer.ggml.eos_token_id", T_U32, eos))
        meta.append(kv("tokenizer.ggml.padding_token_id", T_U32, eos))
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta)) + b"".join(meta)
    with open(args.out, "wb") as f:
        f.write(blob)
    print("%s: %d tokens, %d merges" % (args.out, len(tokens), len(merges)))


if __name__ == "__main__":
    main()
