/*
 * json_schema_num: minimum / maximum / exclusiveMinimum / exclusiveMaximum
 * as exact grammars, digit by digit (the method of llama.cpp's
 * _build_min_max_int, written anew).
 *
 * Every integer part has at most 16 digits, as json-integer has, so an
 * open side of a range stops at +-(10^16 - 1) and all arithmetic fits in
 * int64. "-0" is never produced: a range with 0 in it writes 0 as "0"
 * (llama.cpp also takes "-0" when the range spans zero; one spelling per
 * value is what a host parsing the output wants). A bounded number has no
 * exponent, and its bounds must be whole numbers: with those the bound
 * splits only the integer part and the fraction is "any", "all zeros" or
 * "not all zeros".
 */
#include "json_schema_int.h"

#define CAP 9999999999999999LL     /* 16 digits */
#define SAT 100000000000000000LL   /* beyond CAP: "too big to matter" */

/* A bound's value, exactly enough: its floor and ceiling saturated at
 * +-SAT, and whether it is whole. */
typedef struct bound {
    int present, exclusive;
    long long floor_v, ceil_v;
    int whole;
    const char *keyword;
} bound;

/* Reads a JSON number's text (valid: json_doc checked it) without
 * floating point, so 0.1 or 1e400 are read as what they say. */
static void read_number(const char *s, size_t n, bound *b) {
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    char digits[64];
    size_t nd = 0, dropped = 0; /* significant digits kept; integer ones dropped past 64 */
    long long exp10 = 0;
    int nonzero_dropped = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (nd == 0 && s[i] == '0') continue;
        if (nd < sizeof digits) digits[nd++] = s[i];
        else dropped++;
    }
    exp10 += (long long)dropped;
    if (i < n && s[i] == '.')
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (nd == 0 && s[i] == '0') { exp10--; continue; }
            if (nd < sizeof digits) { digits[nd++] = s[i]; exp10--; }
            else if (s[i] != '0') nonzero_dropped = 1;
        }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
        long long e = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (e < 1000000) e = e * 10 + (s[i] - '0');
        exp10 += eneg ? -e : e;
    }
    /* value = digits * 10^exp10; magnitude = integer part + fraction. */
    long long ip = 0;
    int frac = nonzero_dropped;
    if (nd == 0) {
        ip = 0;
    } else if ((long long)nd + exp10 > 17) {
        ip = SAT;
    } else {
        long long int_digits = (long long)nd + exp10; /* may be <= 0 */
        for (long long k = 0; k < int_digits; k++)
            ip = ip * 10 + (k < (long long)nd ? digits[k] - '0' : 0);
        for (long long k = int_digits < 0 ? 0 : int_digits; k < (long long)nd; k++)
            if (digits[k] != '0') frac = 1;
    }
    if (ip > SAT) ip = SAT;
    b->whole = !frac;
    if (!neg) {
        b->floor_v = ip;
        b->ceil_v = ip + (frac && ip < SAT);
    } else {
        b->floor_v = -ip - (frac && ip < SAT);
        b->ceil_v = -ip;
    }
}

/* ---- digit strings ---- */

static int ndigits(long long v) {
    int n = 1;
    while (v >= 10) { v /= 10; n++; }
    return n;
}

static void digit_class(sbuf *o, char lo, char hi) {
    if (lo == hi) sb_fmt(o, "\"%c\"", lo);
    else sb_fmt(o, "[%c-%c]", lo, hi);
}

static void any_digits(sbuf *o, size_t n) {
    if (n == 1) sb_str(o, "[0-9]");
    else if (n > 1) sb_fmt(o, "[0-9]{%zu}", n);
}

static int all_of(const char *s, size_t n, char ch) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch) return 0;
    return 1;
}

/* Digit strings of length n from x to y (x <= y, both n long): the shared
 * prefix, then at the first difference the low digit's tail, the digits
 * between with any tail, and the high digit's tail. Each level opens at
 * most one group and recurses into one-sided ranges only, so the text is
 * O(n^2) and nests at most n deep. */
static void same_length(sbuf *o, const char *x, const char *y, size_t n) {
    size_t i = 0;
    while (i < n && x[i] == y[i]) i++;
    if (i) {
        sb_put(o, "\"", 1);
        sb_put(o, x, i);
        sb_put(o, "\"", 1);
    }
    if (i == n) return;
    if (i) sb_str(o, " ");
    size_t rest = n - i - 1;
    const char *xr = x + i + 1, *yr = y + i + 1;
    if (rest == 0) {
        digit_class(o, x[i], y[i]);
        return;
    }
    int low_full = all_of(xr, rest, '0'), high_full = all_of(yr, rest, '9');
    char mid_lo = low_full ? x[i] : (char)(x[i] + 1);
    char mid_hi = high_full ? y[i] : (char)(y[i] - 1);
    int alts = 0;
    sb_str(o, "(");
    if (!low_full) {
        char nines[16];
        memset(nines, '9', rest);
        sb_fmt(o, "\"%c\" (", x[i]);
        same_length(o, xr, nines, rest);
        sb_str(o, ")");
        alts++;
    }
    if (mid_lo <= mid_hi) {
        if (alts++) sb_str(o, " | ");
        digit_class(o, mid_lo, mid_hi);
        sb_str(o, " ");
        any_digits(o, rest);
    }
    if (!high_full) {
        char zeros[16];
        memset(zeros, '0', rest);
        if (alts++) sb_str(o, " | ");
        sb_fmt(o, "\"%c\" (", y[i]);
        same_length(o, zeros, yr, rest);
        sb_str(o, ")");
    }
    sb_str(o, ")");
}

/* The decimal spellings (no sign, no leading zero) of lo..hi, 0 <= lo <=
 * hi <= CAP, as alternatives: one group per digit count. */
static void magnitudes(sbuf *o, long long lo, long long hi) {
    long long p10 = 1;
    int alts = 0;
    for (int len = 1; len <= ndigits(hi); len++, p10 *= 10) {
        long long x = lo > (len == 1 ? 0 : p10) ? lo : (len == 1 ? 0 : p10);
        long long y = hi < p10 * 10 - 1 ? hi : p10 * 10 - 1;
        if (x > y) continue;
        if (alts++) sb_str(o, " | ");
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%lld", x);
        snprintf(ys, sizeof ys, "%lld", y);
        sb_str(o, "(");
        same_length(o, xs, ys, (size_t)len);
        sb_str(o, ")");
    }
}

/* Integers lo..hi (-CAP <= lo <= hi <= CAP). */
static void int_range(sbuf *o, long long lo, long long hi) {
    sb_str(o, "(");
    if (lo < 0) {
        sb_str(o, "\"-\" (");
        magnitudes(o, hi < 0 ? -hi : 1, -lo);
        sb_str(o, ")");
    }
    if (hi >= 0) {
        if (lo < 0) sb_str(o, " | ");
        sb_str(o, "(");
        magnitudes(o, lo > 0 ? lo : 0, hi);
        sb_str(o, ")");
    }
    sb_str(o, ")");
}

/* ---- numbers with whole bounds ---- */

#define FRAC_ANY "(\".\" [0-9]{1,16})?"
#define FRAC_ZERO "(\".\" \"0\"{1,16})?"
#define FRAC_NONZERO "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"

/* Magnitudes m = I.F (I <= CAP) with a <= m (a < m if a_excl) and, when
 * has_b, m <= b (m < b if b_excl); 0 <= a. Appends " | "-joined pieces;
 * returns how many. */
static int number_magnitudes(sbuf *o, long long a, int a_excl, int has_b, long long b,
                             int b_excl) {
    int pieces = 0;
    if (has_b && (a > b || (a == b && (a_excl || b_excl)))) return 0;
    /* I strictly between the bounds' integer parts: any fraction. */
    long long lo_any = a_excl ? a + 1 : a;
    long long hi_any = has_b ? b - 1 : CAP;
    if (hi_any > CAP) hi_any = CAP;
    if (a_excl && a <= CAP) {
        sb_fmt(o, "\"%lld\" " FRAC_NONZERO, a);
        pieces++;
    }
    if (lo_any <= hi_any) {
        if (pieces++) sb_str(o, " | ");
        sb_str(o, "(");
        magnitudes(o, lo_any, hi_any);
        sb_str(o, ") " FRAC_ANY);
    }
    if (has_b && !b_excl && b <= CAP && b >= lo_any) {
        if (pieces++) sb_str(o, " | ");
        sb_fmt(o, "\"%lld\" " FRAC_ZERO, b);
    }
    return pieces;
}

static fx_status number_range(conv *c, const bound *lo, const bound *hi, sbuf *o) {
    long long L = lo->floor_v, H = hi->floor_v;
    int has_L = lo->present && L > -SAT, has_H = hi->present && H < SAT;
    sb_str(o, "(");
    int pieces = 0;
    /* x >= 0, written without a sign. */
    if (!has_H || H > 0 || (H == 0 && !hi->exclusive)) {
        int from_L = has_L && L >= 0;
        pieces += number_magnitudes(o, from_L ? L : 0, from_L && lo->exclusive, has_H, H,
                                    hi->exclusive);
    }
    /* x < 0, written "-" m with m > 0 ("-0" and "-0.0" are not written). */
    if (!has_L || L < 0) {
        sbuf neg = {c->alloc, NULL, 0, 0, 0};
        int from_H = has_H && H < 0;
        int n = number_magnitudes(&neg, from_H ? -H : 0, from_H ? hi->exclusive : 1, has_L,
                                  -L, lo->exclusive);
        if (n) {
            if (pieces) sb_str(o, " | ");
            sb_str(o, "\"-\" (");
            sb_put(o, neg.p, neg.len);
            sb_str(o, ")");
            pieces += n;
        }
        if (neg.failed) o->failed = 1;
        sb_free(&neg);
    }
    sb_str(o, ")");
    if (!pieces)
        return fx_js_fail(c, FX_ERR_INVALID_ARG, "the bounds leave no number", NULL);
    return o->failed ? fx_js_oom(c) : FX_OK;
}

/* ---- the keywords ---- */

static fx_status get_bound(conv *c, uint32_t node, const char *key, bound *b) {
    memset(b, 0, sizeof *b);
    b->keyword = key;
    uint32_t v = fx_jdoc_get(c->d, node, key);
    if (v == FX_JSON_NONE) return FX_OK;
    const fx_jnode *n = N(c, v);
    if (n->type != FX_J_NUMBER) return fx_js_fail(c, FX_ERR_INVALID_ARG, key, " must be a number");
    b->present = 1;
    read_number(fx_jdoc_str(c->d, n), n->str_len, b);
    return FX_OK;
}

fx_status fx_js_number(conv *c, uint32_t node, int integer, sbuf *body) {
    bound mn, mx, xmn, xmx;
    if (get_bound(c, node, "minimum", &mn) != FX_OK ||
        get_bound(c, node, "maximum", &mx) != FX_OK)
        return c->status;
    /* Draft 4: exclusiveMinimum / exclusiveMaximum are booleans that make
     * minimum / maximum exclusive; from draft 6 on they are numbers. */
    const char *xk[2] = {"exclusiveMinimum", "exclusiveMaximum"};
    bound *xb[2] = {&xmn, &xmx}, *ib[2] = {&mn, &mx};
    for (int k = 0; k < 2; k++) {
        uint32_t v = fx_jdoc_get(c->d, node, xk[k]);
        int type = v == FX_JSON_NONE ? -1 : (int)N(c, v)->type;
        if (type == FX_J_TRUE || type == FX_J_FALSE) {
            memset(xb[k], 0, sizeof *xb[k]);
            if (type == FX_J_TRUE) {
                if (!ib[k]->present)
                    return fx_js_fail(c, FX_ERR_INVALID_ARG, xk[k],
                                      " true needs the bound it makes exclusive");
                ib[k]->exclusive = 1;
                ib[k]->keyword = xk[k];
            }
        } else if (get_bound(c, node, xk[k], xb[k]) != FX_OK) {
            return c->status;
        } else {
            xb[k]->exclusive = xb[k]->present;
        }
    }
    if (!mn.present && !mx.present && !xmn.present && !xmx.present) {
        c->used |= integer ? USE_INTEGER : USE_NUMBER;
        sb_str(body, integer ? "json-integer" : "json-number");
        return FX_OK;
    }
    if (!integer) {
        bound *all[4] = {&mn, &mx, &xmn, &xmx};
        for (int k = 0; k < 4; k++)
            if (all[k]->present && !all[k]->whole)
                return fx_js_fail(c, FX_ERR_INVALID_ARG, all[k]->keyword,
                                  ": a number's bounds must be whole numbers for a grammar "
                                  "to follow them (use a whole bound, or type integer)");
        /* Whole bounds: the tighter of each side's two. */
        if (xmn.present && (!mn.present || xmn.floor_v >= mn.floor_v)) mn = xmn;
        if (xmx.present && (!mx.present || xmx.floor_v <= mx.floor_v)) mx = xmx;
        return number_range(c, &mn, &mx, body);
    }
    /* An integer n >= 2.5 is n >= 3; n > 2 is n >= 3; likewise above. */
    long long lo = -CAP, hi = CAP;
    const char *lo_kw = NULL, *hi_kw = NULL;
    const bound *lows[2] = {&mn, &xmn}, *highs[2] = {&mx, &xmx};
    for (int k = 0; k < 2; k++) {
        const bound *b = lows[k];
        long long v = b->exclusive ? b->floor_v + 1 : b->ceil_v;
        if (b->present && v >= lo) { lo = v; lo_kw = b->keyword; }
        b = highs[k];
        v = b->exclusive ? b->ceil_v - 1 : b->floor_v;
        if (b->present && v <= hi) { hi = v; hi_kw = b->keyword; }
    }
    if (lo > CAP || hi < -CAP)
        return fx_js_fail(c, FX_ERR_INVALID_ARG, lo > CAP ? lo_kw : hi_kw,
                          ": no integer of at most 16 digits is within the bound");
    if (lo > hi)
        return fx_js_fail(c, FX_ERR_INVALID_ARG, lo_kw, hi_kw && strcmp(hi_kw, "maximum") == 0
                          ? " is above maximum: no integer is allowed"
                          : " is above exclusiveMaximum: no integer is allowed");
    int_range(body, lo, hi);
    return body->failed ? fx_js_oom(c) : FX_OK;
}
