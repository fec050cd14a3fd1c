#!/bin/bash
# ferrox against a llama.cpp-family build on the same GGUF files, one after
# the other in one run, and the ratios.
#
#   tools/bench-vs-llamacpp.sh LLAMA_BUILD_DIR MODEL...
#
# LLAMA_BUILD_DIR holds bin/llama-batched-bench and bin/llama-simple
# (llama.cpp or a fork such as ik_llama.cpp: a reference, never a
# dependency). Environment: FERROX_BUILD (default ./build), THREADS (2),
# NPP (128), NTG (32), NPL ("1,16"), REPEATS (3), LOADS (3), ROUNDS (1),
# KV_TYPE (f32, or f16: ferrox's KV cache; the peer keeps its default,
# f16, either way).
# Per model it runs:
#   llama-batched-bench -npp NPP -ntg NTG -npl NPL -t THREADS: prefill
#       (S_PP at B=1) and decode (S_TG) at each B;
#   ferrox-bench --phases roofline,prefill,decode with the same sizes:
#       tokens/s and the decode's fraction of the run's own read pass;
#   start-up: wall time and peak RSS of `llama-simple -n 1` against
#       `ferrox-run --max-tokens 1`, page cache warm (one run of each
#       first), medians of LOADS (GNU time, Debian package `time`).
#       ferrox-run copies the weights over its first steps (the library's
#       default), ferrox-bench before its first (FX_MODEL_EAGER_COPY): its
#       tok/s are the steady state's.
# With ROUNDS=N the pair runs N times in turn (peer, ferrox, peer, ...)
# and each printed value is the median over the rounds, a ratio the median
# of the rounds' own ratios: this VM's bandwidth moves by a fifth within
# minutes, and a ratio is only fair within one round.
# Nothing else may run meanwhile: llama.cpp's threads spin, and a second
# busy process ruins both sides' numbers. Numbers from different machines
# or different runs of this script are not comparable.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 LLAMA_BUILD_DIR MODEL..." >&2; exit 2; }
peer=$1; shift
build=${FERROX_BUILD:-build}
threads=${THREADS:-2}
npp=${NPP:-128}
ntg=${NTG:-32}
npl=${NPL:-1,16}
repeats=${REPEATS:-3}
loads=${LOADS:-3}
rounds=${ROUNDS:-1}
kv_type=${KV_TYPE:-f32}
gnutime=/usr/bin/time
for f in "$peer/bin/llama-batched-bench" "$peer/bin/llama-simple" \
         "$build/examples/ferrox-bench" "$build/examples/ferrox-run" "$gnutime"; do
    [ -x "$f" ] || { echo "$0: $f is missing" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A JSON number field of the ferrox-bench line for phase/rows.
fx_field() { # file phase rows field
    grep "\"phase\":\"$2\",\"rows\":$3," "$1" | grep '"mode":"deterministic"\|"mode":"-"' |
        sed -n "s/.*\"$4\":\([0-9.eE+-]*\).*/\1/p" | head -1
}
# A column of llama-batched-bench's markdown table at batch size B.
ll_field() { # file B column(1-based among the | fields)
    awk -F'|' -v b="$2" -v c="$3" '$4 + 0 == b && $2 ~ /[0-9]/ { gsub(/ /, "", $(c + 1)); print $(c + 1); exit }' "$1"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print 0 }'; }
# Median wall seconds and peak RSS (MiB) of LOADS runs of a command.
startup() { # out-prefix command...
    local p=$1; shift
    "$@" > /dev/null 2>&1 || true
    : > "$p.t"; : > "$p.m"
    for _ in $(seq "$loads"); do
        "$gnutime" -f '%e %M' -o "$p.one" "$@" > /dev/null 2>&1 || true
        awk '{ print $1 }' "$p.one" >> "$p.t"
        awk '{ print $2 / 1024 }' "$p.one" >> "$p.m"
    done
    echo "$(median < "$p.t") $(median < "$p.m")"
}

echo "# $(uname -n), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%FT%TZ)"
echo "# peer: $peer; ferrox: $build ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "# threads $threads, prompt $npp, generate $ntg, rows $npl, tok/s; medians of $rounds round(s)"
printf '%-22s %-9s %10s %10s %10s %9s %9s %9s\n' model side prefill dec1 "dec${npl##*,}" load_s rss_mib roofline
for model in "$@"; do
    name=$(basename "$model" .gguf)
    rm -f "$tmp"/v.*
    for _ in $(seq "$rounds"); do
        "$peer/bin/llama-batched-bench" -m "$model" -c $(( (npp + ntg) * ${npl##*,} + 64 )) \
            -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" -npl "$npl" -t "$threads" \
            > "$tmp/ll" 2>&1 || { echo "$name: llama-batched-bench failed: $(tail -1 "$tmp/ll")" >&2; continue 2; }
        "$build/examples/ferrox-bench" --model "$model" --threads "$threads" --kv-type "$kv_type" \
            --phases roofline,prefill,decode --rows "$npl" --prompt-tokens "$npp" \
            --gen-tokens "$ntg" --repeats "$repeats" > "$tmp/fx" 2> "$tmp/fx.err" ||
            { echo "$name: ferrox-bench failed: $(tail -1 "$tmp/fx.err")" >&2; continue 2; }
        # llama.cpp's llama-simple takes the prompt as its last argument, the
        # forks' (common argument parser) as -p.
        if "$peer/bin/llama-simple" -m "$model" -n 1 -t "$threads" "Hello" > /dev/null 2>&1; then
            prompt_arg=(Hello)
        else
            prompt_arg=(-p Hello)
        fi
        read -r ll_load ll_rss < <(startup "$tmp/lls" "$peer/bin/llama-simple" -m "$model" -n 1 -t "$threads" "${prompt_arg[@]}")
        read -r fx_load fx_rss < <(startup "$tmp/fxs" "$build/examples/ferrox-run" --model "$model" \
            --prompt "Hello" --max-tokens 1 --threads "$threads" --kv-type "$kv_type")
        last=${npl##*,}
        ll_pp=$(ll_field "$tmp/ll" 1 6); ll_d1=$(ll_field "$tmp/ll" 1 8); ll_dn=$(ll_field "$tmp/ll" "$last" 8)
        fx_pp=$(fx_field "$tmp/fx" prefill 1 tokens_per_s)
        fx_d1=$(fx_field "$tmp/fx" decode 1 tokens_per_s)
        fx_dn=$(fx_field "$tmp/fx" decode "$last" tokens_per_s)
        fx_rf=$(fx_field "$tmp/fx" decode 1 roofline_fraction)
        # one value a line per field and round; the ratios within the round
        for kv in "ll_pp $ll_pp" "ll_d1 $ll_d1" "ll_dn $ll_dn" "ll_load $ll_load" \
                  "ll_rss $ll_rss" "fx_pp $fx_pp" "fx_d1 $fx_d1" "fx_dn $fx_dn" \
                  "fx_load $fx_load" "fx_rss $fx_rss" "fx_rf $fx_rf" \
                  "r_pp $(ratio "$fx_pp" "$ll_pp")" "r_d1 $(ratio "$fx_d1" "$ll_d1")" \
                  "r_dn $(ratio "$fx_dn" "$ll_dn")" "r_load $(ratio "$ll_load" "$fx_load")"; do
            echo "${kv#* }" >> "$tmp/v.${kv%% *}"
        done
    done
    med() { median < "$tmp/v.$1"; }
    # a median as printf's format says, or "-" where a side gave no number
    medf() { awk -v v="$(med "$1")" -v f="$2" 'BEGIN { if (v + 0 > 0) printf f, v; else print "-" }'; }
    ll_pp=$(med ll_pp); ll_d1=$(med ll_d1); ll_dn=$(med ll_dn); ll_load=$(med ll_load); ll_rss=$(med ll_rss)
    fx_pp=$(med fx_pp); fx_d1=$(med fx_d1); fx_dn=$(med fx_dn); fx_load=$(med fx_load); fx_rss=$(med fx_rss)
    fx_rf=$(medf fx_rf '%.4f')
    printf '%-22s %-9s %10.1f %10.1f %10.1f %9.3f %9.0f %9s\n' "$name" peer \
        "$ll_pp" "$ll_d1" "$ll_dn" "$ll_load" "$ll_rss" -
    printf '%-22s %-9s %10.1f %10.1f %10.1f %9.3f %9.0f %9s\n' "$name" ferrox \
        "$fx_pp" "$fx_d1" "$fx_dn" "$fx_load" "$fx_rss" "$fx_rf"
    printf '%-22s %-9s %10s %10s %10s %9s\n' "$name" ratio "$(medf r_pp '%.2fx')" \
        "$(medf r_d1 '%.2fx')" "$(medf r_dn '%.2fx')" "$(medf r_load '%.2fx')"
done
