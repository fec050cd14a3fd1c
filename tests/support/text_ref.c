#include "text_ref.h"

#include <string.h>

/* The bytes a sequence starting with lead needs after it, and the range
 * its first continuation byte must fall in (Unicode Table 3-7); -1 for a
 * byte that cannot start a sequence. */
static int lead_info(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) { *lo = 0xA0; return 2; }
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return 2;
    if (c == 0xED) { *hi = 0x9F; return 2; }
    if (c == 0xF0) { *lo = 0x90; return 3; }
    if (c >= 0xF1 && c <= 0xF3) return 3;
    if (c == 0xF4) { *hi = 0x8F; return 3; }
    return -1;
}

/* Length of the maximal well-formed prefix of the sequence at s[0..n):
 * the full length (need + 1) if complete, else how many bytes of a valid
 * beginning there are; *complete says which. */
static size_t seq_len(const unsigned char *s, size_t n, int *complete,
                      int *truncated) {
    unsigned char lo, hi;
    int need = lead_info(s[0], &lo, &hi);
    *complete = 0, *truncated = 0;
    if (need < 0) return 1;
    if (need == 0) { *complete = 1; return 1; }
    size_t k = 1;
    for (int i = 0; i < need; i++, k++) {
        if (k >= n) { *truncated = 1; return k; }
        unsigned char c = s[k];
        unsigned char l = i == 0 ? lo : 0x80, h = i == 0 ? hi : 0xBF;
        if (c < l || c > h) return k;
    }
    *complete = 1;
    return k;
}

int fx_ref_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int complete, truncated;
        size_t k = seq_len(p + i, n - i, &complete, &truncated);
        if (!complete) return 0;
        i += k;
    }
    return 1;
}

size_t fx_ref_utf8_sanitize(const char *s, size_t n, int flush, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int complete, truncated;
        size_t k = seq_len(p + i, n - i, &complete, &truncated);
        if (complete) {
            memcpy(out + o, s + i, k);
            o += k;
        } else {
            if (truncated && !flush) break;
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
        i += k;
    }
    return o;
}

size_t fx_ref_first_end(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return 0;
    for (size_t e = m; e <= n; e++)
        if (memcmp(hay + e - m, needle, m) == 0) return e;
    return 0;
}
