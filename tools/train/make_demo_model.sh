#!/bin/sh
# Rebuilds models/npc-tiny-*: trains (tools/train/train.py), exports F16 and
# Q8_0 GGUF files, writes the held-out text and PyTorch's perplexity of each
# file's weights on it (the references tests/demo_model.cmake checks).
# Development only; needs Debian's python3-torch and python3-sentencepiece.
# About an hour on 2 cores (one thread; more than one slows down on a busy machine).
#
#   tools/train/make_demo_model.sh [WORK_DIR]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-/tmp/npc-train}
py=/usr/bin/python3
# Two stages: 1,000 steps from scratch, then 800 more on new conversations
# (seed 2) at a lower learning rate, from the first stage's weights.
$py "$top/tools/train/train.py" --out "$work/stage1" --seed 1 --steps 1000 --batch 12 --threads 1
$py "$top/tools/train/train.py" --out "$work" --init "$work/stage1" --seed 2 --steps 800 \
    --batch 12 --lr 1e-3 --threads 1
$py "$top/tools/corpus/npc_corpus.py" --seed 4242 --conversations 150 > "$top/models/npc-tiny-heldout.txt"
refs="$top/models/npc-tiny-reference.txt"
echo "# PyTorch perplexity of each file's weights on npc-tiny-heldout.txt (tools/train/eval_ppl.py)" > "$refs"
for t in f16 q8_0; do
  $py "$top/tools/train/export_gguf.py" "$work" "$top/models/npc-tiny-$t.gguf" --type $t
  $py "$top/tools/train/eval_ppl.py" "$work" "$top/models/npc-tiny-heldout.txt" --as $t |
    sed -n 's/^\([a-z0-9_]*\) PPL = \([0-9.]*\).*/\1 \2/p' >> "$refs"
done
$py "$top/tools/train/eval_ppl.py" "$work" "$top/models/npc-tiny-heldout.txt" --as f32 |
  sed -n 's/^\([a-z0-9_]*\) PPL = \([0-9.]*\).*/\1 \2/p' >> "$refs"
cat "$refs"
