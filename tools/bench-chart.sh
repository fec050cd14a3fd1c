#!/bin/sh
# bench-chart.sh: ferrox-bench JSON lines to a PNG chart (gnuplot).
#
#   tools/bench-chart.sh -o chart.png [-r reference.txt] [-t title] run.jsonl...
#
# Reads the lines of one or more ferrox-bench runs (any mix of weight types
# and modes; a later line for the same weight type, mode, phase and rows
# replaces an earlier one) and draws four panels:
#   decode tokens/s against rows (log scale), one line per weight type and
#   mode, llama.cpp's figures as open points;
#   prefill tokens/s, one bar per weight type and mode, llama.cpp's next
#   to them;
#   roofline_fraction of decode against rows (roofline_fraction_interleaved
#   where the run has it, else roofline_fraction_paired, else the plain
#   one), and of prefill;
#   the roofline measured with each run (bandwidth GB/s, peak GFLOP/s).
# The reference file defaults to llama-cpp-reference.txt next to this
# script (weight_type phase rows tokens_per_s; '#' comments).
set -eu

usage() {
    echo "usage: $0 -o out.png [-r reference.txt] [-t title] run.jsonl..." >&2
    exit 2
}

here=$(dirname "$0")
out=
ref="$here/llama-cpp-reference.txt"
title="ferrox-bench"
while getopts o:r:t:h opt; do
    case $opt in
    o) out=$OPTARG ;;
    r) ref=$OPTARG ;;
    t) title=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$out" ] && [ $# -gt 0 ] || usage
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found" >&2; exit 1; }
for f in "$@"; do [ -r "$f" ] || { echo "$0: cannot read $f" >&2; exit 1; }; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Flat JSON (what ferrox-bench prints) to "key value" fields, with awk only.
# One record per kept line: phase wtype mode rows value roofline_fraction.
cat "$@" | awk -v dir="$tmp" '
function field(line, key,    i, rest) {
    i = index(line, "\"" key "\":")
    if (i == 0) return ""
    rest = substr(line, i + length(key) + 3)
    if (substr(rest, 1, 1) == "\"") {
        rest = substr(rest, 2)
        return substr(rest, 1, index(rest, "\"") - 1)
    }
    match(rest, /^[-+0-9.eE]+|^true|^false/)
    return substr(rest, RSTART, RLENGTH)
}
/^\{/ {
    phase = field($0, "phase"); wt = field($0, "weight_type")
    mode = field($0, "mode"); rows = field($0, "rows")
    if (phase == "roofline") {
        roof[wt] = field($0, "bandwidth_gbps") " " field($0, "peak_gflops") \
                   " " field($0, "sgemm_gflops") " " field($0, "kernel_gflops")
        next
    }
    v = field($0, "tokens_per_s")
    if (v == "") next
    key = phase SUBSEP wt SUBSEP mode SUBSEP rows
    if (!(key in val)) order[++n] = key
    val[key] = v
    # Decode: against read passes run between its own steps, else against
    # probes right around each repeat (ferrox-bench --help); older runs
    # have only the plain fraction.
    f = field($0, "roofline_fraction_interleaved")
    if (f == "") f = field($0, "roofline_fraction_paired")
    frac[key] = f != "" ? f : field($0, "roofline_fraction")
}
END {
    for (i = 1; i <= n; i++) {
        split(order[i], k, SUBSEP)
        f = frac[order[i]]; if (f == "") f = "NaN"
        print k[1], k[2], k[3], k[4], val[order[i]], f > (dir "/all.txt")
    }
    for (w in roof) print w, roof[w] > (dir "/roof.txt")
}'
[ -s "$tmp/all.txt" ] || { echo "$0: no ferrox-bench lines in the input" >&2; exit 1; }
touch "$tmp/roof.txt"

# One data file per (weight type, mode) for the decode lines, sorted by rows.
series=$(awk '$1 == "decode" { print $2 ":" $3 }' "$tmp/all.txt" | sort -u)
for s in $series; do
    wt=${s%%:*}; mode=${s#*:}
    awk -v w="$wt" -v m="$mode" '$1 == "decode" && $2 == w && $3 == m { print $4, $5, $6 }' \
        "$tmp/all.txt" | sort -n > "$tmp/decode_$s.txt"
done
# label value fraction colour (1 deterministic, 2 fast, 3 llama.cpp)
awk '$1 == "prefill" { c = $3 == "fast" ? 2 : 1; print $2 "/" ($3 == "fast" ? "fast" : "det"), $5, $6, c }' \
    "$tmp/all.txt" > "$tmp/prefill.txt"
wtypes=$(awk '{ print $2 }' "$tmp/all.txt" | sort -u)
: > "$tmp/ref_decode.txt"
: > "$tmp/ref_prefill.txt"
if [ -r "$ref" ]; then
    for w in $wtypes; do
        awk -v w="$w" '!/^#/ && $1 == w && $2 == "decode" { print $3, $4 }' "$ref" \
            | sort -n > "$tmp/ref_decode_$w.txt"
        awk -v w="$w" '!/^#/ && $1 == w && $2 == "prefill" { print w "/llama.cpp", $4, "NaN", 3 }' \
            "$ref" >> "$tmp/ref_prefill.txt"
    done
fi
cat "$tmp/prefill.txt" "$tmp/ref_prefill.txt" | sort > "$tmp/prefill_all.txt"

# Colours per weight type; dashes per mode.
colour() {
    case $1 in
    f32) echo "#1f77b4" ;; f16) echo "#2ca02c" ;; bf16) echo "#9467bd" ;;
    q8_0) echo "#d62728" ;; *) echo "#7f7f7f" ;;
    esac
}

{
    echo "set terminal pngcairo size 1400,1000 font 'sans,10' noenhanced"
    echo "set output '$out'"
    echo "set multiplot layout 2,2 title '$title' font 'sans,13'"
    echo "set grid; set key top left"
    # decode tokens/s
    echo "set title 'decode tokens/s (llama.cpp: open points)'"
    echo "set logscale x 2; set xrange [0.8:48]; set xlabel 'rows in flight'; set ylabel 'tokens/s'"
    echo "set yrange [0:*]"
    printf "plot "
    sep=
    for s in $series; do
        wt=${s%%:*}; mode=${s#*:}
        dt=1; [ "$mode" = fast ] && dt=2
        printf "%s'%s' using 1:2 with linespoints lw 2 pt 7 dt %s lc rgb '%s' title '%s %s'" \
            "$sep" "$tmp/decode_$s.txt" "$dt" "$(colour "$wt")" "$wt" "$mode"
        sep=", "
    done
    for w in $wtypes; do
        if [ -s "$tmp/ref_decode_$w.txt" ]; then
            printf "%s'%s' using 1:2 with points pt 6 ps 2 lc rgb '%s' title 'llama.cpp %s'" \
                "$sep" "$tmp/ref_decode_$w.txt" "$(colour "$w")" "$w"
            sep=", "
        fi
    done
    echo
    # prefill bars
    echo "unset logscale x; set autoscale x; set title 'prefill tokens/s (128-token prompt)'"
    echo "set xlabel ''; set ylabel 'tokens/s'; set style fill solid 0.7"
    echo "set boxwidth 0.6; set xtics rotate by -30; set yrange [0:*]; set offsets 0.5,0.5,graph 0.1,0"
    echo "set linetype 11 lc rgb '#1f77b4'; set linetype 12 lc rgb '#aec7e8'; set linetype 13 lc rgb '#7f7f7f'"
    if [ -s "$tmp/prefill_all.txt" ]; then
        echo "plot '$tmp/prefill_all.txt' using 0:2:(\$4 + 10):xtic(1) with boxes lc variable notitle, \
'' using 0:2:(sprintf('%.0f', \$2)) with labels offset 0,0.8 notitle"
    else
        echo "set label 1 'no prefill lines' at graph 0.4,0.5; plot NaN notitle; unset label 1"
    fi
    # roofline fractions
    echo "set xtics norotate; set yrange [0:*]; set offsets 0,0,0,0"
    echo "set title 'roofline fraction: decode = weight bytes/s / bandwidth (interleaved)'; set key top right"
    echo "set logscale x 2; set xrange [0.8:48]; set xlabel 'rows in flight'; set ylabel 'fraction'"
    printf "plot "
    sep=
    for s in $series; do
        wt=${s%%:*}; mode=${s#*:}
        dt=1; [ "$mode" = fast ] && dt=2
        printf "%s'%s' using 1:3 with linespoints lw 2 pt 7 dt %s lc rgb '%s' title '%s %s'" \
            "$sep" "$tmp/decode_$s.txt" "$dt" "$(colour "$wt")" "$wt" "$mode"
        sep=", "
    done
    printf "%s1 with lines lc rgb '#000000' dt 3 title 'roofline'" "$sep"
    echo
    # prefill fractions and the measured rooflines
    echo "unset logscale x; set autoscale x; set key top left; set title 'prefill: FLOP/s / peak GFLOP/s; the rooflines measured'"
    echo "set xlabel ''; set ylabel 'fraction'; set xtics rotate by -30; set offsets 0.5,0.5,graph 0.35,0"
    {
        awk '{ printf "%s", $1; if ($3 != "NaN") printf " %s", $3; else printf " 0"; print "" }' \
            "$tmp/prefill.txt"
    } > "$tmp/prefill_frac.txt"
    label_y=0.96
    while read -r w bw peak sgemm kern; do
        echo "set label at graph 0.02,$label_y '$w run: bandwidth $bw GB/s, peak $peak GFLOP/s (sgemm $sgemm, ferrox $kern)' font 'sans,9'"
        label_y=$(awk -v y="$label_y" 'BEGIN { print y - 0.06 }')
    done < "$tmp/roof.txt"
    if [ -s "$tmp/prefill_frac.txt" ]; then
        echo "plot '$tmp/prefill_frac.txt' using 0:2:xtic(1) with boxes lc rgb '#ff7f0e' notitle, \
'' using 0:2:(sprintf('%.2f', \$2)) with labels offset 0,0.8 notitle"
    else
        echo "plot NaN notitle"
    fi
    echo "unset multiplot"
} > "$tmp/plot.gp"

gnuplot "$tmp/plot.gp"
echo "$out"
