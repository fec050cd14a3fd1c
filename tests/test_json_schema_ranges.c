/*
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum: the grammar
 * (compiled and matched by ferrox's GBNF engine) accepts exactly the
 * values in range -- at the bounds, one step inside and outside, across
 * digit-count changes, negative and one-sided -- for fixed cases and for
 * hundreds of random bounds pairs, each checked over a window around
 * both bounds. Number bounds likewise, with fractions at the edges.
 */
#include "test_util.h"

#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_json_schema_util.h"

#define CAP 9999999999999999LL

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A bound of a random size: 1 to 16 digits, sometimes next to a power of
 * ten (where the digit count changes), either sign. */
static long long random_bound(void) {
    int digits = 1 + (int)(rnd() % 16);
    long long p = 1;
    for (int i = 1; i < digits; i++) p *= 10;
    long long v;
    switch (rnd() % 4) {
    case 0: v = p - 1 + (long long)(rnd() % 3); break;  /* 9..9, 10..0, 10..1 */
    case 1: v = (long long)(rnd() % 100); break;
    default: v = (long long)(rnd() % (uint64_t)(p * 9)) + (digits > 1 ? p : 0);
    }
    if (v > CAP) v = CAP;
    return rnd() % 2 ? -v : v;
}

static void check_value(const fx_grammar *g, const char *schema, long long v, int in) {
    if (v > CAP || v < -CAP) return;
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    int m = match(g, s);
    if ((m == 2) != in) fail_msg("%s: %s %s", schema, s, in ? "refused" : "accepted");
}

/* Every value within w of lo and of hi; lo/hi of LLONG_MIN/MAX mean open. */
static void check_window(const char *schema, long long lo, long long hi, long long w) {
    fx_grammar *g = convert(schema);
    long long centres[2] = {lo, hi};
    for (int k = 0; k < 2; k++) {
        long long c0 = centres[k];
        if (c0 == LLONG_MIN || c0 == LLONG_MAX) continue;
        for (long long v = c0 - w; v <= c0 + w; v++) check_value(g, schema, v, v >= lo && v <= hi);
    }
    /* Zero and the ends of 16 digits; "-0", leading zeros and 17 digits
     * never. */
    long long probes[] = {0, 1, -1, CAP, -CAP, CAP / 2, -CAP / 2};
    for (size_t k = 0; k < sizeof probes / sizeof *probes; k++)
        check_value(g, schema, probes[k], probes[k] >= lo && probes[k] <= hi);
    static const char *const never[] = {"-0", "00", "01", "-01", "10000000000000000",
                                        "-10000000000000000", "1.0", "1e2", "+1", ""};
    for (size_t k = 0; k < sizeof never / sizeof *never; k++)
        if (match(g, never[k]) == 2) fail_msg("%s: accepted %s", schema, never[k]);
    if (lo <= 5 && hi >= 5 && match(g, "05") == 2) fail_msg("%s: accepted 05", schema);
    fx_grammar_free(g);
}

static void test_integer_fixed(void **state) {
    (void)state;
    {
        static const char *const in[] = {"0", "1", "9", "10", "42", "99", "100", NULL};
        static const char *const out[] = {"-1", "101", "00", "007", "-0", "1000", "100.0",
                                          "1e2", " 5", "5 ", NULL};
        expect_language("{\"type\":\"integer\",\"minimum\":0,\"maximum\":100}", in, out);
    }
    {
        /* Exclusive bounds, and the draft-4 boolean form. */
        static const char *const in[] = {"1", "99", NULL};
        static const char *const out[] = {"0", "100", "-1", NULL};
        expect_language("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}",
                        in, out);
        expect_language("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,"
                        "\"maximum\":100,\"exclusiveMaximum\":true}", in, out);
    }
    {
        /* Both kinds on one side: the tighter counts. */
        static const char *const in[] = {"6", "9", NULL};
        static const char *const out[] = {"5", "10", NULL};
        expect_language("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":5,"
                        "\"maximum\":9,\"exclusiveMaximum\":12}", in, out);
        expect_language("{\"type\":\"integer\",\"minimum\":6,\"exclusiveMinimum\":2,"
                        "\"maximum\":11,\"exclusiveMaximum\":10}", in, out);
    }
    {
        /* Non-whole bounds on integers round inwards; exponents read. */
        static const char *const in[] = {"-2", "3", "-3", NULL};
        static const char *const out[] = {"4", "-4", NULL};
        expect_language("{\"type\":\"integer\",\"minimum\":-3.5,\"maximum\":3.99}", in, out);
        expect_language("{\"type\":\"integer\",\"minimum\":-35e-1,\"maximum\":0.0399E2}", in, out);
    }
    {
        /* Negative only: no "-0", no zero. */
        static const char *const in[] = {"-10", "-15", "-99", "-100", NULL};
        static const char *const out[] = {"-9", "-101", "0", "-0", "10", NULL};
        expect_language("{\"type\":\"integer\",\"minimum\":-100,\"maximum\":-10}", in, out);
    }
    {
        /* One-sided, no type (minimum implies a number): whole numbers
         * and fractions of them. */
        static const char *const in[] = {"-5", "0", "123456789", "-4.5", NULL};
        static const char *const out[] = {"-6", "-5.5", "-50", NULL};
        expect_language("{\"minimum\":-5}", in, out);
    }
    /* A bound beyond 16 digits is an open side. */
    static const char *const in16[] = {"9999999999999999", "-9999999999999999", NULL};
    expect_language("{\"type\":\"integer\",\"minimum\":-1e300,\"maximum\":1e300}", in16, NULL);
}

static void test_integer_random(void **state) {
    (void)state;
    char schema[256];
    int pairs = 0;
    for (int i = 0; i < 240; i++) {
        long long a = random_bound(), b = random_bound();
        if (i % 8 == 0) b = a + (long long)(rnd() % 30); /* narrow ranges */
        if (b > CAP) b = CAP;
        long long lo = a < b ? a : b, hi = a < b ? b : a;
        int kind = (int)(rnd() % 6);
        switch (kind) {
        case 0: /* both, inclusive */
            snprintf(schema, sizeof schema,
                     "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", lo, hi);
            check_window(schema, lo, hi, 25);
            break;
        case 1: /* both, exclusive */
            snprintf(schema, sizeof schema,
                     "{\"type\":\"integer\",\"exclusiveMinimum\":%lld,\"exclusiveMaximum\":%lld}",
                     lo - 1, hi + 1);
            if (lo - 1 < -CAP || hi + 1 > CAP) continue;
            check_window(schema, lo, hi, 25);
            break;
        case 2: /* minimum only */
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld}", lo);
            check_window(schema, lo, LLONG_MAX, 25);
            break;
        case 3: /* maximum only */
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"maximum\":%lld}", hi);
            check_window(schema, LLONG_MIN, hi, 25);
            break;
        case 4: /* exclusiveMinimum only */
            if (lo - 1 < -CAP) continue;
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"exclusiveMinimum\":%lld}",
                     lo - 1);
            check_window(schema, lo, LLONG_MAX, 25);
            break;
        default: /* exclusiveMaximum only */
            if (hi + 1 > CAP) continue;
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"exclusiveMaximum\":%lld}",
                     hi + 1);
            check_window(schema, LLONG_MIN, hi, 25);
        }
        pairs++;
    }
    /* Every small range whole: all pairs in -30..30. */
    for (long long lo = -30; lo <= 30; lo += 3)
        for (long long hi = lo; hi <= 30; hi += 4) {
            snprintf(schema, sizeof schema,
                     "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", lo, hi);
            check_window(schema, lo, hi, 40);
            pairs++;
        }
    assert_true(pairs > 300);
}

/* ---- numbers ---- */

/* v / 1000 against whole bounds; lo_x / hi_x: exclusive. */
static int num_in(long long v, int has_lo, long long lo, int lo_x, int has_hi, long long hi,
                  int hi_x) {
    if (has_lo && (lo_x ? v <= lo * 1000 : v < lo * 1000)) return 0;
    if (has_hi && (hi_x ? v >= hi * 1000 : v > hi * 1000)) return 0;
    return 1;
}

static void number_text(char *s, size_t n, long long v, int style) {
    long long a = v < 0 ? -v : v;
    const char *sign = v < 0 ? "-" : "";
    if (style == 0 && a % 1000 == 0) snprintf(s, n, "%s%lld", sign, a / 1000);
    else if (style == 1) snprintf(s, n, "%s%lld.%03lld", sign, a / 1000, a % 1000);
    else snprintf(s, n, "%s%lld.%03lld000", sign, a / 1000, a % 1000);
}

static void test_number_bounds(void **state) {
    (void)state;
    {
        static const char *const in[] = {"0", "0.0", "0.5", "9.999", "10", "10.0", "10.000",
                                         "3", NULL};
        static const char *const out[] = {"-0.5", "10.01", "10.1", "11", "-0", "-0.0", "1e1",
                                          "010", NULL};
        expect_language("{\"type\":\"number\",\"minimum\":0,\"maximum\":10}", in, out);
    }
    {
        static const char *const in[] = {"0.001", "1", "0.10", "123456.5", NULL};
        static const char *const out[] = {"0", "0.0", "0.000", "-1", "-0.5", NULL};
        expect_language("{\"type\":\"number\",\"exclusiveMinimum\":0}", in, out);
    }
    {
        static const char *const in[] = {"-2.5", "-3", "-2.001", "-9999999999999999.5", NULL};
        static const char *const out[] = {"-2", "-2.0", "-1.9", "0", "2.5", NULL};
        expect_language("{\"type\":\"number\",\"exclusiveMaximum\":-2}", in, out);
    }
    {
        /* Whole bounds written with a fraction or an exponent. */
        static const char *const in[] = {"-1", "-1.0", "-0.5", "0", "10", "10.00", NULL};
        static const char *const out[] = {"-1.01", "10.5", "-2", NULL};
        expect_language("{\"type\":\"number\",\"minimum\":-1.0,\"maximum\":1e1}", in, out);
    }
    /* Random whole bounds; values in thousandths around both. */
    char schema[256];
    for (int i = 0; i < 120; i++) {
        long long a = (long long)(rnd() % 2001) - 1000, b = (long long)(rnd() % 2001) - 1000;
        if (i % 4 == 0) b = a + (long long)(rnd() % 3);
        long long lo = a < b ? a : b, hi = a < b ? b : a;
        int has_lo = i % 5 != 1, has_hi = i % 5 != 2, lo_x = (int)(rnd() % 2),
            hi_x = (int)(rnd() % 2);
        if (!has_lo && !has_hi) continue;
        int n = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
        if (has_lo)
            n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%lld",
                          lo_x ? "exclusiveMinimum" : "minimum", lo);
        if (has_hi)
            n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%lld",
                          hi_x ? "exclusiveMaximum" : "maximum", hi);
        snprintf(schema + n, sizeof schema - (size_t)n, "}");
        if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_x || hi_x)))) {
            expect_error(schema, "the bounds leave no number");
            continue;
        }
        fx_grammar *g = convert(schema);
        long long centres[2] = {lo * 1000, hi * 1000};
        static const long long steps[] = {0, 1, 2, 500, 999, 1000, 1001, 1500, 2000, 2999};
        for (int k = 0; k < 2; k++)
            for (size_t s = 0; s < sizeof steps / sizeof *steps; s++)
                for (int sg = -1; sg <= 1; sg += 2) {
                    long long v = centres[k] + sg * steps[s];
                    int want = num_in(v, has_lo, lo, lo_x, has_hi, hi, hi_x);
                    for (int style = 0; style < 3; style++) {
                        char text[64];
                        number_text(text, sizeof text, v, style);
                        if (strcmp(text, "-0") == 0 || strncmp(text, "-0.000", 6) == 0)
                            continue; /* "-0" is never written */
                        if ((match(g, text) == 2) != want)
                            fail_msg("%s: %s %s", schema, text, want ? "refused" : "accepted");
                    }
                }
        fx_grammar_free(g);
    }
}

static void test_bound_errors(void **state) {
    (void)state;
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
                 "minimum is above maximum: no integer is allowed");
    expect_error("{\"type\":\"integer\",\"exclusiveMinimum\":4,\"exclusiveMaximum\":5}",
                 "exclusiveMinimum is above exclusiveMaximum");
    expect_error("{\"type\":\"integer\",\"minimum\":1e20}",
                 "minimum: no integer of at most 16 digits");
    expect_error("{\"type\":\"integer\",\"maximum\":-1e17}",
                 "maximum: no integer of at most 16 digits");
    expect_error("{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":\"1\"}}}",
                 "at /properties/n: minimum must be a number");
    expect_error("{\"type\":\"integer\",\"exclusiveMaximum\":true}",
                 "exclusiveMaximum true needs the bound it makes exclusive");
    expect_error("{\"type\":\"number\",\"minimum\":0.5}",
                 "minimum: a number's bounds must be whole numbers");
    expect_error("{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":1e-3}",
                 "exclusiveMaximum: a number's bounds must be whole");
    expect_error("{\"type\":\"number\",\"minimum\":3,\"maximum\":2}", "the bounds leave no number");
    expect_error("{\"type\":\"number\",\"exclusiveMinimum\":2,\"maximum\":2}",
                 "the bounds leave no number");
    expect_error("{\"type\":[\"number\",\"null\"],\"maximum\":1.5}", "whole numbers");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integer_fixed),
        cmocka_unit_test(test_integer_random),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_bound_errors),
    };
    return cmocka_run_group_tests_name("json_schema_ranges", tests, schema_setup,
                                       schema_teardown);
}
