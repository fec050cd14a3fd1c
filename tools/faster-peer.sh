#!/bin/sh
# ferrox against the faster of two peers, from two runs of
# tools/bench-vs-llamacpp.sh on the same files and machine, and issue
# #38's speed targets checked against that peer.
#
#   tools/bench-vs-llamacpp.sh IK_BUILD MODELS... > ik.txt
#   tools/bench-vs-llamacpp.sh LLAMA_BUILD MODELS... > llama.txt
#   tools/faster-peer.sh ik.txt llama.txt
#
# Per model and column (prefill, one-row decode, the last row count's
# decode, start-up) the peer with the higher tok/s (for start-up the lower
# seconds) is the one compared with, and the ratio printed is the one
# measured in that peer's run (each run pairs the peer with ferrox in
# turn; a ratio across runs would mix two moments of a noisy machine).
# The roofline is ferrox's one-row fraction in each run (lowest-highest).
# Targets (issue #38): Q4_K_M one row >= 1.2x and roofline >= 0.9, 16 rows
# >= 2x, prefill >= 1.5x; Q4_0, Q5_K_M, Q6_K, IQ4_XS one row >= 1.1x;
# every file's start-up within 1.2x of llama.cpp's (the second run's).
# A model is known by its file name (q4_k_m, q4_0, ...), as the script
# prints it.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 PEER1_RUN.txt PEER2_RUN.txt (llama.cpp's run second)" >&2; exit 2; }
awk '
FNR == 1 { run++ }
/^#/ || $1 == "model" { next }
{
    m = $1; side = $2
    if (!(m in seen)) { seen[m] = 1; order[++n] = m }
    if (side == "peer") { for (c = 1; c <= 4; c++) peer[run, m, c] = $(c + 2) }
    else if (side == "ferrox") {
        for (c = 1; c <= 4; c++) fx[run, m, c] = $(c + 2)
        rf[run, m] = $8
    } else if (side == "ratio") {
        for (c = 1; c <= 4; c++) { r = $(c + 2); sub(/x$/, "", r); ratio[run, m, c] = r }
    }
}
function type_of(m,   t) {
    t = tolower(m)
    if (t ~ /q4_k_m/) return "Q4_K_M"
    if (t ~ /q5_k_m/) return "Q5_K_M"
    if (t ~ /q6_k/) return "Q6_K"
    if (t ~ /q4_0/) return "Q4_0"
    if (t ~ /iq4_xs/) return "IQ4_XS"
    if (t ~ /q8_0/) return "Q8_0"
    if (t ~ /f32/) return "F32"
    return "?"
}
function check(name, value, least) {
    printf "  %-38s %6.2f  %s %.2f: %s\n", name, value, ">=", least, (value >= least ? "met" : "MISSED")
    if (value < least) missed++
}
END {
    if (run != 2) { print "need two runs" > "/dev/stderr"; exit 2 }
    split("prefill dec1 decN start-up", col, " ")
    printf "%-22s %-8s %12s %12s %12s %12s %11s\n", "model", "", col[1], col[2], col[3], col[4], "roofline"
    for (i = 1; i <= n; i++) {
        m = order[i]
        line_p = ""; line_f = ""; line_r = ""
        for (c = 1; c <= 4; c++) {
            # the faster peer: more tok/s, or fewer seconds to start
            a = peer[1, m, c] + 0; b = peer[2, m, c] + 0
            r = (c < 4 ? (a >= b) : (a <= b && a > 0) || b == 0) ? 1 : 2
            best[m, c] = ratio[r, m, c] + 0
            line_p = line_p sprintf(" %10s%-2s", peer[r, m, c], "@" r)
            line_f = line_f sprintf(" %12s", fx[r, m, c])
            line_r = line_r sprintf(" %11.2fx", best[m, c])
        }
        lo = rf[1, m] + 0; hi = rf[2, m] + 0
        if (lo > hi) { t = lo; lo = hi; hi = t }
        rfmin[m] = lo
        printf "%-22s %-8s%s\n", m, "peer", line_p
        printf "%-22s %-8s%s\n", m, "ferrox", line_f
        printf "%-22s %-8s%s %5.2f-%.2f\n", m, "ratio", line_r, lo, hi
    }
    print ""
    print "issue #38 targets (against the faster peer; @1/@2: whose run):"
    missed = 0
    for (i = 1; i <= n; i++) {
        m = order[i]; t = type_of(m)
        if (t == "Q4_K_M") {
            check(m " one row", best[m, 2], 1.2)
            check(m " one-row roofline (lower run)", rfmin[m], 0.9)
            check(m " 16 rows", best[m, 3], 2.0)
            check(m " prefill", best[m, 1], 1.5)
        } else if (t == "Q4_0" || t == "Q5_K_M" || t == "Q6_K" || t == "IQ4_XS") {
            check(m " one row", best[m, 2], 1.1)
        }
        # start-up: the ratio printed by the script is peer s / ferrox s
        check(m " start-up vs llama.cpp (1/1.2)", ratio[2, m, 4] + 0, 1 / 1.2)
    }
    print missed ? missed " target(s) missed" : "every target met"
}' "$1" "$2"
