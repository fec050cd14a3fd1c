#!/bin/sh
# Greedy tokens of ferrox against a llama.cpp build on the same GGUF files.
#
#   tools/greedy-vs-llamacpp.sh LLAMA_DIR MODEL...
#
# LLAMA_DIR is a llama.cpp (or ik_llama.cpp) source checkout built in
# LLAMA_DIR/build (the reference, never a dependency of ferrox). Environment: FERROX_BUILD
# (default ./build), N_TOKENS (default 64), PROMPT, FX_THREADS (default 2),
# KV_TYPE (f32, the default, or f16: both sides then store the KV cache
# as f16; llama.cpp also rounds the query and the attention weights to
# f16 there, ferrox keeps them F32).
# For each model, ferrox-run tokenizes PROMPT and decodes greedily; the
# same prompt ids go to llamacpp-greedy (tools/llamacpp-greedy.c, compiled
# here against LLAMA_DIR) with the same KV cache type. A model passes when the
# generated ids are equal to the end, or first differ at a step where
# llama.cpp's own top-2 logit margin is below MARGIN (default 0.15): a
# near-tie that rounding decides.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 LLAMA_DIR MODEL..." >&2; exit 2; }
llama=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
build=${FERROX_BUILD:-build}
n=${N_TOKENS:-64}
margin=${MARGIN:-0.15}
prompt=${PROMPT:-"Once upon a time, in a village by the sea, there lived"}
kv=${KV_TYPE:-f32}
case $kv in
    f32) FX_KV_F16=0 ;;
    f16) FX_KV_F16=1 ;;
    *) echo "KV_TYPE must be f32 or f16" >&2; exit 2 ;;
esac
export FX_KV_F16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# llama.cpp puts its libraries in build/bin, ik_llama.cpp in build/src
# and build/ggml/src, without a separate ggml-base.
libs=""
for d in "$llama/build/bin" "$llama/build/src" "$llama/build/ggml/src"; do
    [ -d "$d" ] && libs="$libs -L$d -Wl,-rpath,$d"
done
base="" old=""
ls "$llama"/build/bin/libggml-base.* >/dev/null 2>&1 && base="-lggml-base"
grep -q "llama_pos *pos_0" "$llama/include/llama.h" && old="-DFX_LLAMA_OLD_API"
# shellcheck disable=SC2086 # $libs, $base and $old are lists of options
cc -O2 $old -o "$tmp/llamacpp-greedy" "$here/llamacpp-greedy.c" \
    -I"$llama/include" -I"$llama/ggml/include" $libs -lllama -lggml $base

status=0
for model in "$@"; do
    "$build/examples/ferrox-run" --model "$model" --prompt "$prompt" --ids \
        --max-tokens "$n" --ignore-eos --threads "${FX_THREADS:-2}" --kv-type "$kv" \
        > "$tmp/fx" 2> "$tmp/fx.err" || {
        echo "$model: ferrox-run failed: $(tail -1 "$tmp/fx.err")"
        status=1; continue; }
    ids=$(sed -n 's/^prompt: //p' "$tmp/fx")
    sed -n 's/^gen: //p' "$tmp/fx" | tr ' ' '\n' | grep . > "$tmp/fx.gen"
    # shellcheck disable=SC2086 # the ids are separate arguments
    "$tmp/llamacpp-greedy" "$model" "$n" $ids > "$tmp/ll" 2> "$tmp/ll.err" || {
        echo "$model: llamacpp-greedy failed: $(tail -1 "$tmp/ll.err")"
        status=1; continue; }
    awk '{print $2}' "$tmp/ll" > "$tmp/ll.gen"
    verdict=$(paste -d' ' "$tmp/fx.gen" "$tmp/ll.gen" | awk -v m="$margin" \
        -v ll="$tmp/ll" '
        BEGIN { while ((getline l < ll) > 0) { split(l, f, " "); mg[f[1]] = f[3] } }
        { if ($1 != $2) { s = NR - 1
              printf "first differs at step %d of %d (ferrox %s, llama.cpp %s), llama.cpp margin %s: %s\n",
                  s, n, $1, $2, mg[s], (mg[s] + 0 < m + 0) ? "PASS (near-tie)" : "FAIL"
              found = 1; exit } }
        END { if (!found) printf "all %d tokens equal: PASS\n", NR }' n="$n")
    echo "$(basename "$model"): $verdict"
    case $verdict in *FAIL*) status=1 ;; esac
done
exit $status
