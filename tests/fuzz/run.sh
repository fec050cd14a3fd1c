#!/bin/sh
# usage: tests/fuzz/run.sh FUZZ_BUILD_DIR TARGET SECONDS [WORK_DIR]
#
# Runs one libFuzzer target (gguf, tokenizer, text, grammar, api, jinja) of a
# -DFERROX_FUZZ=ON build for SECONDS, on a copy of its seed corpus in
# WORK_DIR (default ./fuzz-work; kept, so a later run continues from what
# this one found), at nice 10, one job. The tokenizer target reads the
# vocabularies from $FX_FUZZ_VOCAB_DIR, else the build's test-data/vocab. Findings go
# to WORK_DIR/artifacts-TARGET/. Ends with libFuzzer's final line (cov: edges,
# ft: features, exec/s) and stats. Exit status: libFuzzer's (0: nothing
# found).
#
#   CC=clang cmake -S . -B build-fuzz -DFERROX_FUZZ=ON -DFERROX_BUILD_EXAMPLES=OFF
#   cmake --build build-fuzz --target fuzz_gguf fuzz_tokenizer fuzz_text fuzz_grammar fuzz_api fuzz_jinja
#   tests/fuzz/run.sh build-fuzz gguf 600
set -eu
[ $# -ge 3 ] || { sed -n '2,17p' "$0"; exit 2; }
build=$1 target=$2 secs=$3 work=${4:-fuzz-work}
src=$(cd "$(dirname "$0")" && pwd)
bin=$build/tests/fuzz/fuzz_$target
[ -x "$bin" ] || { echo "no $bin: build it with -DFERROX_FUZZ=ON"; exit 2; }
case $target in
  gguf) max_len=65536 ;;  # the quantized seeds are 6-56 KB
  grammar) max_len=1024 ;;
  jinja) max_len=4096 ;;
  *) max_len=512 ;;
esac
mkdir -p "$work/corpus-$target" "$work/artifacts-$target"
# Seeds first; what earlier runs found stays.
cp -n "$src/corpus/$target/"* "$work/corpus-$target/" 2>/dev/null || true
log=$work/$target.log
set +e
nice -n 10 "$bin" "$work/corpus-$target" -max_total_time="$secs" \
  -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts-$target/" > "$log" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+[[:space:]]+DONE|^Done|^stat::' "$log" || tail -40 "$log"
[ "$rc" -eq 0 ] || echo "finding: see $log and $work/artifacts-$target/"
exit "$rc"
