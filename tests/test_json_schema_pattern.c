/*
 * pattern and format: each construct of the regex subset, matched by
 * ferrox's GBNF engine against strings just inside and just outside the
 * pattern's language (written as JSON strings: characters JSON escapes
 * appear escaped); each construct outside the subset an error naming it;
 * repetition and nesting bounded by errors, not by a blow-up; formats
 * date, time, date-time and uuid at the edges of their fields.
 */
#include "test_util.h"

#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_json_schema_util.h"

typedef struct pcase {
    const char *pattern;    /* as JSON string text */
    const char *in[8];      /* JSON strings the grammar accepts */
    const char *out[8];     /* ... and refuses */
} pcase;

static const pcase pcases[] = {
    /* Literals, escaped metacharacters, a quote and a backslash. */
    {"^ab\\\\.c$", {"\"ab.c\""}, {"\"abxc\"", "\"ab.\"", "\"ab.cc\"", "\"ab\\\\.c\""}},
    {"^a\\\"b\\\\\\\\$", {"\"a\\\"b\\\\\""}, {"\"a\"b\\\\\"", "\"a\\\"b\\\"", "\"a\\u0022b\\\\\""}},
    {"^\\\\$\\\\^\\\\(\\\\)\\\\[\\\\]\\\\{\\\\}\\\\*\\\\+\\\\?\\\\|\\\\/$", {"\"$^()[]{}*+?|/\""},
     {"\"$^()[]{}*+?|\""}},
    /* Classes: ranges, lists, negation, escapes inside. */
    {"^[a-c0-2_]$", {"\"a\"", "\"c\"", "\"0\"", "\"2\"", "\"_\""},
     {"\"d\"", "\"3\"", "\"A\"", "\"\"", "\"ab\""}},
    {"^[^a-c\\\\n]$", {"\"d\"", "\"\\\"\"", "\"\\\\\"", "\"\\t\"", "\"\\u0001\"", "\"\xc3\xa9\""},
     {"\"a\"", "\"c\"", "\"\\n\"", "\"\"", "\"\t\""}},
    {"^[\\\\d\\\\s-]+$", {"\"1 2-3\"", "\"\\t\"", "\"-\""}, {"\"a\"", "\"\""}},
    {"^[\\\\]\\\\\\\\^x-]$", {"\"]\"", "\"\\\\\"", "\"^\"", "\"x\"", "\"-\""}, {"\"y\"", "\"[\""}},
    {"^[\xd0\xb0-\xd1\x8f]{2}$", {"\"\xd0\xb4\xd0\xb0\"", "\"\xd1\x8f\xd0\xb0\""},
     {"\"\xd0\xb0\"", "\"ab\"", "\"\xd1\x90\xd0\xb0\""}},
    /* Shorthands outside classes, and `.`. */
    {"^\\\\d\\\\D\\\\w\\\\W\\\\s\\\\S$", {"\"1a_ \\t!\"", "\"9zZ\\n x\""},
     {"\"11_ \\t!\"", "\"1a_a\\t!\"", "\"1a_ x!\"", "\"1a_  \\t\""}},
    {"^.{3}$", {"\"abc\"", "\"a\\\"\\\\\"", "\"\xe2\x82\xac\\t.\""},
     {"\"ab\"", "\"abcd\"", "\"a\\nb\"", "\"a\\rb\""}},
    /* Groups, alternation, non-capturing and named groups. */
    {"^(ab|cd)+(?:x|)$", {"\"ab\"", "\"cdabx\"", "\"abab\""}, {"\"\"", "\"x\"", "\"abc\"", "\"ac\""}},
    {"^(?<year>[0-9]{2})-(?P<m>1|2)$", {"\"19-1\"", "\"00-2\""}, {"\"19-3\"", "\"1-1\""}},
    {"^a|b$", {"\"a\"", "\"b\""}, {"\"ab\"", "\"\""}},
    /* Quantifiers: ? * + {m} {m,} {m,n} {,n}, lazy and possessive. */
    {"^a?b*c+$", {"\"c\"", "\"abbcc\"", "\"bc\""}, {"\"ab\"", "\"aac\"", "\"\""}},
    {"^x{3}y{2,}z{1,2}w{,1}$", {"\"xxxyyz\"", "\"xxxyyyyzzw\""},
     {"\"xxyyz\"", "\"xxxyz\"", "\"xxxyyzzz\"", "\"xxxyyzww\""}},
    {"^a+?b*?c??$", {"\"a\"", "\"aabbc\""}, {"\"b\"", "\"acc\""}},
    {"^(ab){2}$", {"\"abab\""}, {"\"ab\"", "\"ababab\""}},
    /* A '{' that opens no quantifier is itself. */
    {"^a{b}$", {"\"a{b}\""}, {"\"ab\""}},
    /* Escapes: \\t \\n \\x \\u, control characters written as JSON does. */
    {"^\\\\t\\\\x41\\\\u00e9\\\\u0001$", {"\"\\tA\xc3\xa9\\u0001\""},
     {"\"\tA\xc3\xa9\\u0001\"", "\"\\tA\\u00e9\\u0001\"", "\"\\tA\xc3\xa9\\u0002\""}},
    /* Empty. */
    {"^$", {"\"\""}, {"\"a\""}},
};

static void test_patterns(void **state) {
    (void)state;
    char schema[512];
    for (size_t i = 0; i < sizeof pcases / sizeof *pcases; i++) {
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"}",
                 pcases[i].pattern);
        expect_language(schema, pcases[i].in, pcases[i].out);
    }
    /* No type: pattern implies a string; inside an object. */
    static const char *const in[] = {"{\"id\":\"A-12\"}", NULL};
    static const char *const out[] = {"{\"id\":\"a-12\"}", "{\"id\":\"A-1\"}", NULL};
    expect_language("{\"properties\":{\"id\":{\"pattern\":\"^[A-Z]-[0-9]{2}$\"}},"
                    "\"required\":[\"id\"]}", in, out);
}

static void test_pattern_errors(void **state) {
    (void)state;
    static const char *const errs[][2] = {
        {"a+", "pattern must be anchored as ^...$"},
        {"^a", "pattern must be anchored"},
        {"a$", "pattern must be anchored"},
        {"^a\\\\$", "pattern must be anchored"},
        {"^(a)\\\\1$", "backreferences (\\1 .. \\9) are not supported (at offset 4 of the pattern)"},
        {"^(?<n>a)\\\\k<n>$", "backreferences (\\k<name>)"},
        {"^a(?=b)$", "lookahead"},
        {"^a(?!b)$", "lookahead"},
        {"^(?<=a)b$", "lookbehind"},
        {"^(?<!a)b$", "lookbehind"},
        {"^(?i)a$", "group syntax (?...)"},
        {"^\\\\bword$", "word boundaries (\\b)"},
        {"^\\\\Bx$", "word boundaries (\\B)"},
        {"^\\\\p{L}$", "Unicode property classes"},
        {"^\\\\Aa$", "anchors other than ^ and $"},
        {"^\\\\cA$", "control escapes"},
        {"^\\\\q$", "an unknown escape"},
        {"^a$|^b$", "an anchor (^ or $) inside the pattern"},
        {"^*a$", "a quantifier with nothing to repeat"},
        {"^a**$", "a quantifier on a quantifier"},
        {"^a{2}{3}$", "a quantifier on a quantifier"},
        {"^(a$", "an unclosed group"},
        {"^a)$", "an unbalanced ')'"},
        {"^[a-$", "an unterminated character class"},
        {"^[z-a]$", "a range whose end is before its start"},
        {"^[a-\\\\d]$", "a range ending in a class escape"},
        {"^[[:alpha:]]$", "POSIX classes"},
        {"^[^\\\\s\\\\S]$", "a character class that matches nothing"},
        {"^\\\\x4$", "\\x needs two hex digits"},
        {"^\\\\ud800$", "\\u needs four hex digits, not a surrogate"},
        {"^a\\\\$", "pattern must be anchored"},
        {"^a{1001}$", "a repetition count above 1000"},
        {"^a{2,1001}$", "a repetition count above 1000"},
        {"^a{5,2}$", "a repetition {m,n} with n < m"},
        {"^(a?)*$", "an unbounded repetition of something that can match the empty string"},
        {"^(a|)+$", "an unbounded repetition"},
        {"^(b*){2,}$", "an unbounded repetition"},
        /* 1000 x 1000 copies: past the expansion bound, refused at once. */
        {"^(a{1000}){1000}$", "repetitions that expand past 262144 grammar elements"},
        {"^((ab){30}){30}((cd){40}){1000}$", "repetitions that expand past"},
    };
    char schema[512];
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"}", errs[i][0]);
        expect_error(schema, errs[i][1]);
    }
    expect_error("{\"items\":{\"type\":\"string\",\"pattern\":\"^(a$\"}}",
                 "at /items: pattern: an unclosed group");
    expect_error("{\"type\":\"string\",\"pattern\":5}", "pattern must be a string");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}",
                 "pattern together with minLength/maxLength is not supported");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a$\",\"format\":\"date\"}",
                 "pattern together with format is not supported");
    expect_error("{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":3}",
                 "format together with minLength/maxLength is not supported");

    /* Groups nested 40 deep are fine, 41 are refused. */
    char deep[512];
    for (int depth = 40; depth <= 41; depth++) {
        size_t n = (size_t)snprintf(deep, sizeof deep, "{\"type\":\"string\",\"pattern\":\"^");
        for (int i = 0; i < depth; i++) deep[n++] = '(';
        deep[n++] = 'a';
        for (int i = 0; i < depth; i++) deep[n++] = ')';
        snprintf(deep + n, sizeof deep - n, "$\"}");
        if (depth == 40) {
            static const char *const in[] = {"\"a\"", NULL};
            static const char *const out[] = {"\"aa\"", NULL};
            expect_language(deep, in, out);
        } else {
            expect_error(deep, "groups nested deeper than 40");
        }
    }
    /* A class of 128 ranges is fine, 129 are refused. */
    char cls[2048];
    for (int ranges = 128; ranges <= 129; ranges++) {
        size_t n = (size_t)snprintf(cls, sizeof cls, "{\"type\":\"string\",\"pattern\":\"^[");
        for (int i = 0; i < ranges; i++) n += (size_t)snprintf(cls + n, sizeof cls - n, "\\\\u%04x",
                                                               0x400 + 2 * i);
        snprintf(cls + n, sizeof cls - n, "]$\"}");
        if (ranges == 128) {
            static const char *const in[] = {"\"\xd0\x80\"", NULL};
            static const char *const out[] = {"\"\xd0\x81\"", NULL};
            expect_language(cls, in, out);
        } else {
            expect_error(cls, "a character class with too many ranges");
        }
    }
    /* The largest bounded expansion the converter allows compiles. */
    fx_grammar *g = convert("{\"type\":\"string\",\"pattern\":\"^(ab{1,2}){1000}$\"}");
    fx_grammar_free(g);
}

static void test_formats(void **state) {
    (void)state;
    {
        static const char *const in[] = {"\"2024-01-31\"", "\"0000-12-01\"", "\"9999-10-29\"", NULL};
        static const char *const out[] = {"\"2024-00-10\"", "\"2024-13-01\"", "\"2024-01-00\"",
                                          "\"2024-01-32\"", "\"24-01-01\"", "\"2024-1-01\"",
                                          "2024-01-01", NULL};
        expect_language("{\"type\":\"string\",\"format\":\"date\"}", in, out);
    }
    {
        static const char *const in[] = {"\"00:00:00Z\"", "\"23:59:59.123+05:30\"",
                                         "\"12:00:00-23:59\"", NULL};
        static const char *const out[] = {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:60Z\"",
                                          "\"12:00:00\"", "\"12:00:00.12Z\"", "\"12:00:00+24:00\"",
                                          NULL};
        expect_language("{\"format\":\"time\"}", in, out);
    }
    {
        static const char *const in[] = {"\"2024-02-29T23:59:59Z\"", "\"1999-12-31T00:00:00.000-01:00\"",
                                         NULL};
        static const char *const out[] = {"\"2024-02-29 23:59:59Z\"", "\"2024-02-29T23:59:59\"",
                                          "\"2024-02-29\"", NULL};
        expect_language("{\"type\":\"string\",\"format\":\"date-time\"}", in, out);
    }
    {
        static const char *const in[] = {"\"123e4567-e89b-12d3-a456-426614174000\"",
                                         "\"ABCDEF01-2345-6789-abcd-ef0123456789\"", NULL};
        static const char *const out[] = {"\"123e4567-e89b-12d3-a456-42661417400\"",
                                          "\"123e4567e89b12d3a456426614174000\"",
                                          "\"g23e4567-e89b-12d3-a456-426614174000\"", NULL};
        expect_language("{\"type\":\"string\",\"format\":\"uuid\"}", in, out);
        expect_language("{\"type\":\"string\",\"format\":\"uuid4\"}", in, out);
    }
    {
        /* Other formats are annotations: any string. */
        static const char *const in[] = {"\"not an email\"", NULL};
        expect_language("{\"type\":\"string\",\"format\":\"email\"}", in, NULL);
        expect_language("{\"type\":\"string\",\"format\":\"uuid6\"}", in, NULL);
        static const char *const any[] = {"1", "\"x\"", NULL};
        expect_language("{\"format\":\"hostname\"}", any, NULL);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_pattern_errors),
        cmocka_unit_test(test_formats),
    };
    return cmocka_run_group_tests_name("json_schema_pattern", tests, schema_setup,
                                       schema_teardown);
}
