#!/usr/bin/python3
"""Trains ferrox's demo model: a SentencePiece vocabulary and a small Llama
on generated NPC dialogue (tools/corpus/npc_corpus.py). Development only:
building and testing ferrox never runs this.

    /usr/bin/python3 tools/train/train.py --out /tmp/npc-train [--steps N]
        [--init EARLIER_RUN]   (continue: same vocabulary, new data)

Needs Debian's python3-torch and python3-sentencepiece. Seeded: the same
arguments on the same torch build give the same weights. Writes
OUT/tokenizer.model, OUT/model.pt (weights + config) and OUT/log.jsonl.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus", "npc_corpus.py")
SPECIALS = ["<|im_start|>", "<|im_end|>"]


def corpus(seed, n):
    return subprocess.run([sys.executable, CORPUS, "--seed", str(seed), "--conversations", str(n)],
                          check=True, capture_output=True, text=True).stdout


def train_vocab(text, out, vocab):
    path = os.path.join(out, "vocab-train.txt")
    with open(path, "w") as f:
        f.write(text)
    spm.SentencePieceTrainer.train(
        input=path, model_prefix=os.path.join(out, "tokenizer"), vocab_size=vocab,
        model_type="bpe", byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, split_digits=True,
        user_defined_symbols=SPECIALS, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=1 << 16, num_threads=2, minloglevel=2)
    os.remove(path)
    return spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))


def encode(sp, text):
    """Token ids of a corpus text, one conversation turn at a time (the
    specials are user-defined pieces, so SentencePiece keeps them whole)."""
    ids = []
    for chunk in text.split("<|im_start|>"):
        if chunk:
            ids.extend(sp.encode("<|im_start|>" + chunk))
    return torch.tensor(ids, dtype=torch.long)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--conversations", type=int, default=120000)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", help="continue from this run directory's model.pt and tokenizer")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)

    text = corpus(a.seed, a.conversations)
    if a.init:
        shutil.copy(os.path.join(a.init, "tokenizer.model"), os.path.join(a.out, "tokenizer.model"))
        sp = spm.SentencePieceProcessor(model_file=os.path.join(a.out, "tokenizer.model"))
    else:
        sp = train_vocab(text[: 8 << 20], a.out, a.vocab)
    data = encode(sp, text)
    held = encode(sp, corpus(a.seed + 1000, 300))
    print(f"corpus {len(text)} bytes, {len(data)} tokens; held-out {len(held)} tokens", flush=True)

    cfg = Config(sp.get_piece_size(), a.dim, a.layers, a.heads, a.kv_heads, a.ffn, a.ctx)
    model = Model(cfg)
    if a.init:
        model.load_state_dict(torch.load(os.path.join(a.init, "model.pt"), map_location="cpu")["state"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params} parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    warm = max(1, a.steps // 20)
    gen = torch.Generator().manual_seed(a.seed)
    log = open(os.path.join(a.out, "log.jsonl"), "w")
    t0 = time.time()

    def held_loss():
        model.eval()
        n = (len(held) - 1) // a.ctx
        with torch.no_grad():
            x = held[: n * a.ctx].view(n, a.ctx)
            y = held[1: n * a.ctx + 1].view(n, a.ctx)
            loss = torch.nn.functional.cross_entropy(model(x).view(-1, cfg.vocab), y.reshape(-1))
        model.train()
        return loss.item()

    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - a.ctx - 1, (a.batch,), generator=gen)
        x = torch.stack([data[s: s + a.ctx] for s in starts])
        y = torch.stack([data[s + 1: s + a.ctx + 1] for s in starts])
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, cfg.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == a.steps - 1:
            rec = {"step": step, "loss": round(loss.item(), 4), "lr": lr,
                   "tok_s": round((step + 1) * a.batch * a.ctx / (time.time() - t0))}
            if step % 500 == 0 or step == a.steps - 1:
                rec["held_out"] = round(held_loss(), 4)
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            torch.save({"config": cfg.as_dict(), "state": model.state_dict(), "step": step,
                        "args": vars(a)}, os.path.join(a.out, "model.pt"))
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
