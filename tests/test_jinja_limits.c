/*
 * The Jinja interpreter's bounds (issue 39, docs/reliability.md): every
 * hostile or broken template ends in a status with a message naming the
 * place and the reason -- never a crash, a hang or unbounded memory.
 * Deep nesting, huge loops, output and memory blow-up, runaway macro
 * recursion, malformed syntax, unterminated tags, invalid UTF-8 and NUL
 * bytes, allocation failure at every allocation. Calls lib/chat/jinja.h
 * directly, to set small limits and a failing allocator.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chat/jinja.h"
#include "fault_alloc.h"
#include "test_util.h"

static const fx_chat_msg one_user[] = { { FX_CHAT_ROLE_USER, "hi", 2 } };

typedef struct outcome {
    fx_status status;
    char text[256];      /* the start of the output, or the message */
    size_t len;
} outcome;

static outcome run_with(const fx_alloc *alloc, const char *tmpl, size_t len,
                        const fx_jinja_limits *lim, const char *extra) {
    fx_jinja_input in = { 0 };
    in.tmpl = tmpl;
    in.tmpl_len = len;
    in.msgs = one_user;
    in.n_msgs = 1;
    in.bos = "<s>";
    in.bos_len = 3;
    in.eos = "</s>";
    in.eos_len = 4;
    in.extra_json = extra;
    in.extra_len = extra ? strlen(extra) : 0;
    fx_error err;
    fx_error_clear(&err);
    char *out = NULL;
    outcome o = { FX_OK, "", 0 };
    o.status = fx_jinja_render(alloc, &in, lim, &out, &o.len, &err);
    if (o.status == FX_OK) {
        snprintf(o.text, sizeof o.text, "%s", out);
        fx_free(alloc, out);
    } else {
        assert_null(out);
        fx_error_copy(&err, o.text, sizeof o.text);
    }
    return o;
}

static outcome run(const char *tmpl) {
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    return run_with(&alloc, tmpl, strlen(tmpl), &lim, NULL);
}

static void expect_fail(const char *label, const char *tmpl, fx_status want,
                        const char *in_message) {
    outcome o = run(tmpl);
    if (o.status != want)
        fail_msg("%s: expected %s, got %s (%s)", label, fx_status_str(want),
                 fx_status_str(o.status), o.text);
    if (in_message && !strstr(o.text, in_message))
        fail_msg("%s: message \"%s\" lacks \"%s\"", label, o.text, in_message);
}

static char *repeated(const char *head, const char *unit, size_t n,
                      const char *mid, const char *unit2, const char *tail) {
    size_t len = strlen(head) + n * (strlen(unit) + strlen(unit2)) +
                 strlen(mid) + strlen(tail) + 1;
    char *s = malloc(len);
    assert_non_null(s);
    strcpy(s, head);
    for (size_t i = 0; i < n; i++) strcat(s, unit);
    strcat(s, mid);
    for (size_t i = 0; i < n; i++) strcat(s, unit2);
    strcat(s, tail);
    return s;
}

static void test_deep_nesting(void **state) {
    (void)state;
    char *t = repeated("{{ ", "(", 5000, "1", ")", " }}");
    expect_fail("parentheses", t, FX_ERR_BAD_TEMPLATE, "nested more than");
    free(t);
    t = repeated("{{ ", "[", 5000, "1", "]", " }}");
    expect_fail("lists", t, FX_ERR_BAD_TEMPLATE, "nested more than");
    free(t);
    t = repeated("{{ ", "not ", 100000, "1", "", " }}");
    expect_fail("not", t, FX_ERR_BAD_TEMPLATE, "nested more than");
    free(t);
    t = repeated("{{ ", "-", 100000, "1", "", " }}");
    expect_fail("unary minus", t, FX_ERR_BAD_TEMPLATE, "nested more than");
    free(t);
    t = repeated("", "{% if true %}", 5000, "x", "{% endif %}", "");
    expect_fail("blocks", t, FX_ERR_BAD_TEMPLATE, "line 1 column");
    free(t);
    /* Nesting that parses fine is still fine. */
    t = repeated("{{ ", "(", 20, "1", ")", " }}");
    outcome o = run(t);
    assert_int_equal(o.status, FX_OK);
    assert_string_equal(o.text, "1");
    free(t);
    /* Values nested by a loop, then compared or serialized. */
    expect_fail("nested values", "{% set ns = namespace(x=[]) %}{% for i in "
                "range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                "{{ ns.x == ns.x }}", FX_ERR_BAD_TEMPLATE, "nested more than");
    expect_fail("tojson depth", "{% set ns = namespace(x=[]) %}{% for i in "
                "range(200) %}{% set ns.x = [ns.x] %}{% endfor %}"
                "{{ ns.x | tojson }}", FX_ERR_BAD_TEMPLATE, "nested");
    expect_fail("self-holding namespace", "{% set ns = namespace() %}"
                "{% set ns.me = ns %}{{ ns }}", FX_ERR_BAD_TEMPLATE, "nested");
}

static void test_loops(void **state) {
    (void)state;
    expect_fail("huge range", "{% for i in range(10000000000) %}x"
                "{% endfor %}", FX_ERR_BAD_TEMPLATE, "range()");
    /* 10^10 iterations: the step budget ends them... */
    expect_fail("nested loops", "{% set r = range(100000) %}{% for i in r %}"
                "{% for j in r %}{% endfor %}{% endfor %}",
                FX_ERR_BAD_TEMPLATE, "budget");
    /* ...or, when each builds a fresh 100000-item list, the memory cap. */
    expect_fail("nested ranges", "{% for i in range(100000) %}{% for j in "
                "range(100000) %}{% endfor %}{% endfor %}", FX_ERR_TOO_LARGE,
                "memory cap");
    expect_fail("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}"
                "{% endmacro %}{{ f(0) }}", FX_ERR_BAD_TEMPLATE,
                "macro calls nested");
    expect_fail("mutual recursion", "{% macro a() %}{{ b() }}{% endmacro %}"
                "{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
                FX_ERR_BAD_TEMPLATE, "macro calls nested");
    /* Nesting inside recursion counts against the same budget: 20 nested
     * ifs in a macro that recurses 20 deep is past 64. */
    char *t = repeated("{% macro f(n) %}", "{% if true %}", 20,
                       "{% if n > 0 %}{{ f(n - 1) }}{% endif %}", "{% endif %}",
                       "{% endmacro %}{{ f(20) }}");
    expect_fail("nesting times recursion", t, FX_ERR_BAD_TEMPLATE,
                "nested more than 64 deep");
    free(t);
    /* Bounded recursion is fine. */
    outcome o = run("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}"
                    "{% endif %}{% endmacro %}{{ f(5) }}");
    assert_int_equal(o.status, FX_OK);
    assert_string_equal(o.text, "54321");
    expect_fail("break outside a loop", "{% break %}", FX_ERR_BAD_TEMPLATE,
                "outside a loop");
}

static void test_blowup(void **state) {
    (void)state;
    expect_fail("string repetition", "{{ 'x' * 100000000000 }}",
                FX_ERR_TOO_LARGE, "memory cap");
    expect_fail("list repetition", "{{ [1, 2] * 100000000000 }}",
                FX_ERR_TOO_LARGE, "memory cap");
    expect_fail("output loop", "{% set s = 'x' * 1000000 %}{% for i in "
                "range(100) %}{{ s }}{% endfor %}", FX_ERR_TOO_LARGE,
                "rendered text exceeds");
    expect_fail("doubling", "{% set ns = namespace(s='x') %}{% for i in "
                "range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                FX_ERR_TOO_LARGE, NULL);
    expect_fail("integer overflow", "{{ 2 ** 64 }}", FX_ERR_BAD_TEMPLATE,
                "overflow");

    /* The caller's limits hold. */
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    const char *loop = "{% for i in range(1000) %}{{ i }}{% endfor %}";
    lim.max_steps = 500;
    outcome o = run_with(&alloc, loop, strlen(loop), &lim, NULL);
    assert_int_equal(o.status, FX_ERR_BAD_TEMPLATE);
    assert_non_null(strstr(o.text, "budget"));
    fx_jinja_limits_default(&lim);
    lim.max_output = 100;
    o = run_with(&alloc, loop, strlen(loop), &lim, NULL);
    assert_int_equal(o.status, FX_ERR_TOO_LARGE);
    fx_jinja_limits_default(&lim);
    lim.max_memory = 1024;
    o = run_with(&alloc, loop, strlen(loop), &lim, NULL);
    assert_int_equal(o.status, FX_ERR_TOO_LARGE);
    fx_jinja_limits_default(&lim);
    o = run_with(&alloc, loop, strlen(loop), &lim, NULL);
    assert_int_equal(o.status, FX_OK);
    assert_int_equal(o.len, 2890);
}

static void test_malformed(void **state) {
    (void)state;
    static const struct { const char *tmpl, *msg; } bad[] = {
        { "{{ x", "unterminated {{" },
        { "{% if x", "unterminated {%" },
        { "{# comment", "unterminated comment" },
        { "{% raw %}{{ x }}", "without {% endraw %}" },
        { "{{ 'abc }}", "unterminated string" },
        { "{% if x %}a", "endif" },
        { "{% for x in y %}", "endfor" },
        { "{% macro m() %}", "endmacro" },
        { "{% set x %}", "endset" },
        { "{% for in y %}{% endfor %}", "expected 'in'" },
        { "{% for x in %}{% endfor %}", "expected an expression" },
        { "{% endfor %}", "misplaced statement 'endfor'" },
        { "{% else %}", "misplaced" },
        { "{% set %}", "expected a name" },
        { "{{ x. }}", "attribute name" },
        { "{{ x[1:2:3:4] }}", "too many ':'" },
        { "{{ ) }}", "unexpected ')'" },
        { "{{ 1 2 }}", "expected '}}'" },
        { "{{ 'a' ? 'b' }}", "unexpected character" },
        { "{{ '\\x4' }}", "escape" },
        { "{{ 99999999999999999999 }}", "too large" },
        { "line\n  {{ 1 + }}", "line 2 column 10" },
        { "{{ x | nosuchfilter }}", "no filter named 'nosuchfilter'" },
        { "{{ 1 is nosuchtest }}", "unknown test 'nosuchtest'" },
        { "{{ raise_exception('custom reason') }}", "custom reason" },
        { "{{ undefined_name.attr }}", "'undefined_name' is undefined" },
        { "{{ 1 + 'a' }}", "unsupported operand" },
        { "{{ [].append(1) }}", "is undefined" },
        { "{{ 1 / 0 }}", "division by zero" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_fail(bad[i].tmpl, bad[i].tmpl, FX_ERR_BAD_TEMPLATE, bad[i].msg);
}

static void test_bytes(void **state) {
    (void)state;
    /* Templates must be UTF-8 text; messages pass through as bytes. */
    expect_fail("invalid UTF-8", "ok {{ 1 }}\n\xff\xfe", FX_ERR_BAD_TEMPLATE,
                "line 2 column 1: the template is not valid UTF-8");
    expect_fail("overlong", "\xc0\xaf", FX_ERR_BAD_TEMPLATE, "UTF-8");
    expect_fail("surrogate", "\xed\xa0\x80", FX_ERR_BAD_TEMPLATE, "UTF-8");
    expect_fail("truncated", "abc\xe2\x82", FX_ERR_BAD_TEMPLATE, "UTF-8");
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    outcome o = run_with(&alloc, "a\0b", 3, &lim, NULL);
    assert_int_equal(o.status, FX_ERR_BAD_TEMPLATE);
    assert_non_null(strstr(o.text, "NUL"));
    expect_fail("NUL escape", "{{ '\\x00' }}", FX_ERR_BAD_TEMPLATE, "NUL");
    /* Invalid UTF-8 and NUL in the context. */
    o = run_with(&alloc, "{{ x }}", 7, &lim, "{\"x\": \"a\\u0000\"}");
    assert_int_equal(o.status, FX_ERR_INVALID_ARG);
    const char *upper = "{{ x | upper }}|{{ x | length }}";
    o = run_with(&alloc, upper, strlen(upper), &lim,
                 "{\"x\": \"\xff" "a\xc3\"}");
    assert_int_equal(o.status, FX_OK);
    assert_string_equal(o.text, "\xff" "A\xc3|3");
    char deep[20001];
    memset(deep, '[', 20000);
    deep[20000] = '\0';
    char ctx[20100];
    snprintf(ctx, sizeof ctx, "{\"x\": %s}", deep);
    o = run_with(&alloc, "{{ x }}", 7, &lim, ctx);
    assert_int_equal(o.status, FX_ERR_INVALID_ARG);
    assert_non_null(strstr(o.text, "nested too deeply"));
}

/* ---- allocation failure at every allocation ---- */

static void test_allocation_failure(void **state) {
    (void)state;
    fx_fault_alloc fa = {0};
    fx_allocator hooks = fx_fault_allocator(&fa);
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    /* Big enough to need several arena chunks. */
    const char *tmpl = "{% set ns = namespace(s='') %}{% for i in range(3000) "
                       "%}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.s | length "
                       "}}{{ x | tojson }}";
    const char *ctx = "{\"x\": {\"a\": [1, 2.5, \"s\", null, true]}}";
    long failures = 0;
    for (long k = 1;; k++) {
        fx_fault_plan(&fa, k, 1);
        outcome o = run_with(&alloc, tmpl, strlen(tmpl), &lim, ctx);
        assert_int_equal(fa.live, 0);
        if (o.status == FX_OK) {
            assert_string_equal(o.text, "10890{\"a\": [1, 2.5, \"s\", null, "
                                "true]}");
            break;
        }
        assert_int_equal(o.status, FX_ERR_NOMEM);
        failures++;
        assert_true(k < 10000);
    }
    assert_true(failures >= 3);
}

/* ---- end-of-turn markers derived from the real templates ---- */

/* For every template of tests/data/chat that a family's markers name, the
 * marker derived by rendering it is one of that family's stop texts (or
 * the EOS text): derivation agrees with the table where both exist, which
 * is what lets it stand in for templates the table does not know. */
static void test_derived_stop_agrees(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    size_t len = 0;
    char *tsv = fx_test_read_file(fx_test_data_path("chat/cases.tsv"), &len);
    assert_non_null(tsv);
    size_t checked = 0, derived = 0;
    char last[256] = "";
    for (char *line = tsv; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        char *tab1 = strchr(line, '\t');
        char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (line[0] != '#' && tab1 && tab2) {
            *tab2 = '\0';
            const char *file = tab1 + 1;
            if (strcmp(file, last) != 0) {
                snprintf(last, sizeof last, "%s", file);
                char rel[300];
                snprintf(rel, sizeof rel, "chat/templates/%s", file);
                size_t n = 0;
                char *tmpl = fx_test_read_file(fx_test_data_path(rel), &n);
                assert_non_null(tmpl);
                fx_chat_tmpl t;
                assert_int_equal(fx_chat_tmpl_detect(tmpl, n, &t, NULL), FX_OK);
                char marker[72];
                size_t k = fx_chat_derive_stop(&alloc, tmpl, n, "<s>", 3, "</s>",
                                               4, marker, sizeof marker);
                derived += k > 0;
                if (k && t.family < FX_CHAT_FAMILY_COUNT) {
                    const char *texts[8];
                    size_t nt = fx_chat_stop_texts(&t, texts, 8);
                    int found = strcmp(marker, "</s>") == 0;
                    for (size_t i = 0; i < nt; i++)
                        found |= strcmp(texts[i], marker) == 0;
                    if (!found)
                        fail_msg("%s (%s): derived %s, not a stop text of the "
                                 "family", file, fx_chat_family_str(t.family),
                                 marker);
                    checked++;
                }
                free(tmpl);
            }
        }
        line = end ? end + 1 : NULL;
    }
    free(tsv);
    print_message("%zu templates of a known family agree; %zu templates gave "
                  "a marker\n", checked, derived);
    assert_true(checked >= 20);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_blowup),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_derived_stop_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
