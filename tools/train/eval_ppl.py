#!/usr/bin/python3
"""PyTorch's perplexity of a trained model on a text file, by the method
ferrox-perplexity (and llama.cpp's llama-perplexity) uses: chunks of CTX
tokens, the second half of each scored. The weights can first be rounded
as a GGUF type stores them, so the number is that of the exported file's
weights. Development only.

    /usr/bin/python3 tools/train/eval_ppl.py RUN_DIR TEXT [--ctx N] [--as f32|f16|q8_0]
"""
import argparse
import math
import os
import sys

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_gguf import GGML_F16, GGML_Q8_0, encode  # noqa: E402
from model import Config, Model  # noqa: E402
from train import encode as encode_text  # noqa: E402


def rounded(w, kind):
    """w as the GGUF type stores it, back in float32."""
    a = w.float().numpy()
    if kind == "f16":
        return torch.from_numpy(a.astype(np.float16).astype(np.float32))
    if kind == "q8_0":
        raw = np.frombuffer(encode(a, GGML_Q8_0), dtype=[("d", "<f2"), ("q", "i1", 32)])
        deq = raw["d"].astype(np.float32)[:, None] * raw["q"].astype(np.float32)
        return torch.from_numpy(deq.reshape(a.shape))
    return w.float()


def load(run, kind):
    ck = torch.load(os.path.join(run, "model.pt"), map_location="cpu")
    cfg = Config(**{k: v for k, v in ck["config"].items() if k != "head_dim"})
    m = Model(cfg)
    # Norm vectors stay F32 in the file; every matrix takes the type.
    state = {k: (rounded(v, kind) if v.dim() >= 2 else v.float()) for k, v in ck["state"].items()}
    m.load_state_dict(state)
    m.eval()
    return m, cfg


def perplexity(model, cfg, ids, ctx):
    n_chunks = len(ids) // ctx
    first = ctx // 2
    total, count = 0.0, 0
    with torch.no_grad():
        for c in range(n_chunks):
            x = ids[c * ctx:(c + 1) * ctx][None]
            logits = model(x)[0].double()
            lp = torch.log_softmax(logits[first:ctx - 1], dim=-1)
            tgt = x[0, first + 1:ctx]
            total += -lp[torch.arange(len(tgt)), tgt].sum().item()
            count += len(tgt)
    return math.exp(total / count), count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=0)
    ap.add_argument("--as", dest="kind", choices=["f32", "f16", "q8_0"], default="f32")
    a = ap.parse_args()
    model, cfg = load(a.run, a.kind)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.run, "tokenizer.model"))
    ids = encode_text(sp, open(a.text, encoding="utf-8").read())
    ppl, n = perplexity(model, cfg, ids, a.ctx or cfg.ctx)
    print(f"{a.kind} PPL = {ppl:.4f} ({n} tokens scored, {len(ids)} tokens)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
