/*
 * JSON Schema to GBNF: each schema's grammar compiles, accepts the
 * documents the schema allows (byte by byte and whole) and refuses the
 * ones it does not; schemas outside the subset are errors that say where;
 * an allocation failure anywhere is FX_ERR_NOMEM with nothing leaked.
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

typedef struct schema_case {
    const char *schema;
    const char *accept[6];  /* whole documents */
    const char *reject[6];  /* not even a prefix of one */
    const char *partial[3]; /* a prefix, never complete as it stands */
} schema_case;

static const schema_case cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
     "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\"]}",
     {"{\"name\":\"bob\"}", "{\"name\":\"bob\",\"age\":42}",
      "{ \"name\" : \"abcde\" ,\n  \"age\": -3 }", "{\"name\":\"\"}"},
     {"{\"age\":42}", "{\"name\":\"abcdef\"}", "{\"name\":\"bob\",\"extra\":1}",
      "{\"name\":\"bob\"} ", "{\"name\":\"b\",\"age\":1.5}", "{\"name\":\"b\",\"age\":01}"},
     {"{\"name\":\"bo", "{"}},
    /* Every member optional: any of them may come first. */
    {"{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
     "\"c\":{\"type\":\"number\"}}}",
     {"{}", "{\"a\":true}", "{\"b\":null}", "{\"c\":-0.5e+3}", "{\"a\":false,\"c\":1}",
      "{\"a\":true,\"b\":null,\"c\":2}"},
     {"{,}", "{\"a\":1}", "{\"d\":1}", "{\"a\":true,}", "{\"c\":1,\"a\":true}"},
     {"{\"c\":1"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}",
     {"{}", "{\"x\":1.5,\"y\":-2e3}", "{\"\\u00e9\":0}"},
     {"{\"x\":\"s\"}", "{\"x\":1,}"},
     {"{\"x\":1"}},
    {"{\"properties\":{\"id\":{\"const\":7}},\"required\":[\"id\"],"
     "\"additionalProperties\":{\"type\":\"string\"}}",
     {"{\"id\":7}", "{\"id\":7,\"note\":\"x\"}"},
     {"{\"id\":8}", "{\"note\":\"x\"}", "{\"id\":7,\"n\":1}"},
     {"{\"id\":7,\"n\":\"x"}},
    {"{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",3,null]},\"minItems\":1,"
     "\"maxItems\":3}",
     {"[\"a\"]", "[\"a\",3,null]", "[ null ]"},
     {"[]", "[\"a\",\"a\",\"a\",\"a\"]", "[\"c\"]", "[4]"},
     {"[\"a\","}},
    {"{\"type\":\"array\",\"maxItems\":0}", {"[]", "[ ]"}, {"[1]"}, {"["}},
    {"{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[\"x\",1]", "[ \"x\" , -1 ]"},
     {"[\"x\",1,2]", "[1,1]", "[\"x\",\"y\"]"},
     {"[\"x\"", "[\"x\","}},
    {"{\"prefixItems\":[{\"const\":\"op\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2,"
     "\"maxItems\":3}",
     {"[\"op\",true]", "[\"op\",true,false]"},
     {"[\"op\"]", "[\"op\",true,true,true]", "[\"no\",true]"},
     {"[\"op\",true"}},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":[\"integer\",\"null\"]}]}",
     {"\"s\"", "12", "null", "-7"},
     {"true", "1.5", "[]"},
     {"\"s"}},
    {"{\"oneOf\":[{\"type\":\"boolean\"},{\"allOf\":[{\"type\":\"number\"}]}]}",
     {"true", "2.5"}, {"\"x\""}, {"tru"}},
    /* A recursive definition through $ref. */
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
     "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"},
     {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":["}},
    {"{\"definitions\":{\"a~b/c\":{\"type\":\"null\"}},"
     "\"$ref\":\"#/definitions/a~0b~1c\"}",
     {"null"}, {"1"}, {"nu"}},
    {"{\"const\":{\"a\":[1,\"x\\n\\\"\"]}}",
     {"{\"a\":[1,\"x\\n\\\"\"]}"},
     {"{ \"a\":[1,\"x\\n\\\"\"]}", "{\"a\":[1,\"x\"]}"},
     {"{\"a\":[1,"}},
    {"true", {"[1,{\"a\":null}]", "\"s\"", "0", "{}"}, {"tru e", "[1,]"}, {"{\"a\""}},
    {"{}", {"[1,{\"a\":null}]", "false"}, {"{]"}, {"["}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3,\"description\":\"ignored\","
     "\"format\":\"ignored too\"}",
     {"\"ab\"", "\"abc\"", "\"\\u00e9x\"", "\"\xc3\xa9x\""},
     {"\"a\"", "\"abcd\"", "\"a\nb\""},
     {"\"ab"}},
    {"{\"properties\":{\"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\":{\"type\":\"boolean\"}},"
     "\"required\":[\"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\"]}",
     {"{\"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\":true}"},
     {"{\"k\":true}"},
     {"{\"\xd0\xba"}},
    /* allOf of several object schemas: properties and required united,
     * closed to others; $ref elements and the schema's own properties
     * join in. */
    {"{\"$defs\":{\"id\":{\"properties\":{\"id\":{\"type\":\"integer\"}},"
     "\"required\":[\"id\"]}},\"properties\":{\"tag\":{\"type\":\"boolean\"}},"
     "\"allOf\":[{\"$ref\":\"#/$defs/id\"},{\"type\":\"object\",\"properties\":"
     "{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"],"
     "\"additionalProperties\":false}]}",
     {"{\"id\":1,\"name\":\"x\"}", "{\"id\":1,\"name\":\"x\",\"tag\":true}",
      "{\"id\":1,\"name\":\"\",\"tag\":false}"},
     {"{\"id\":1}", "{\"name\":\"x\"}", "{\"id\":1,\"name\":\"x\",\"z\":1}",
      "{\"id\":\"1\",\"name\":\"x\"}"},
     {"{\"id\":1,"}},
    /* The same property in two elements, described the same: one. */
    {"{\"allOf\":[{\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]},"
     "{\"properties\":{\"a\":{\"const\":1}}},true],\"additionalProperties\":"
     "{\"type\":\"null\"}}",
     {"{\"a\":1}", "{\"a\":1,\"b\":null}"},
     {"{\"a\":2}", "{\"a\":1,\"b\":1}", "{\"a\":1,\"a\":null}", "{}"},
     {"{\"a\":1,\"b\""}},
    /* additionalProperties beside properties: an extra member never
     * repeats a listed name (llama.cpp's _not_strings), prefixes and
     * longer names are other keys; escapes may follow the first character
     * that differs. */
    {"{\"properties\":{\"ab\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
     "\"\xc3\xa9t\xc3\xa9\":{\"type\":\"integer\"},\"q\\\"\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":{\"type\":\"string\"}}",
     {"{\"ab\":1,\"a\":\"x\"}", "{\"abc\":\"x\"}", "{\"\":\"x\",\"c\\n\":\"y\"}",
      "{\"b\":2,\"ba\":\"y\"}", "{\"\xc3\xa9t\":\"x\"}", "{\"q\\\"\":3}"},
     {"{\"ab\":1,\"ab\":\"x\"}", "{\"b\":\"x\"}", "{\"\xc3\xa9t\xc3\xa9\":\"x\"}",
      "{\"\\u0062\":\"x\"}", "{\"a\\u0062\":\"x\"}"},
     {"{\"ab\":1,\"a"}},
    /* Required names the properties do not describe take any value. */
    {"{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}",
     {"{\"a\":1,\"b\":[true]}"}, {"{\"a\":1}", "{\"b\":1}"}, {"{\"a\":1,"}},
};

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const schema_case *c = &cases[i];
        fx_grammar *g = convert(c->schema);
        for (size_t k = 0; k < 6 && c->accept[k]; k++)
            if (match(g, c->accept[k]) != 2)
                fail_msg("schema %zu should accept %s (got %d)", i, c->accept[k],
                         match(g, c->accept[k]));
        for (size_t k = 0; k < 6 && c->reject[k]; k++)
            if (match(g, c->reject[k]) == 2)
                fail_msg("schema %zu should refuse %s", i, c->reject[k]);
        for (size_t k = 0; k < 3 && c->partial[k]; k++)
            if (match(g, c->partial[k]) != 1)
                fail_msg("schema %zu: %s should be a prefix only (got %d)", i,
                         c->partial[k], match(g, c->partial[k]));
        fx_grammar_free(g);
    }
}

static void test_errors(void **state) {
    (void)state;
    expect_error("{\"type\":\n \"object\",}", "line 2, column 11");
    expect_error("", "line 1, column 1");
    expect_error("{\"type\":\"integer\",\"multipleOf\":2}", "unsupported keyword multipleOf");
    expect_error("{\"properties\":{\"age\":{\"type\":\"integer\",\"not\":{}}}}",
                 "at /properties/age: unsupported keyword not");
    expect_error("{\"items\":{\"pattern\":\"a+\"}}", "at /items: pattern must be anchored");
    expect_error("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", "does not resolve: #/$defs/missing");
    expect_error("{\"$ref\":\"https://example.com/s.json\"}", "pointer into this document");
    expect_error("{\"type\":\"decimal\"}", "unknown type decimal");
    expect_error("{\"type\":[]}", "empty list");
    expect_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minimum is above");
    expect_error("{\"type\":\"array\",\"maxItems\":5000}", "above 1000");
    expect_error("{\"type\":\"string\",\"minLength\":-1}", "minLength must be a non-negative");
    expect_error("{\"type\":\"string\",\"maxLength\":1.5}", "maxLength must be");
    expect_error("false", "matches nothing");
    expect_error("[1]", "must be an object or a boolean");
    expect_error("{\"enum\":[]}", "enum must be a non-empty array");
    expect_error("{\"anyOf\":{}}", "anyOf must be a non-empty array");
    /* allOf of several: object schemas only, no conflicting property. */
    expect_error("{\"allOf\":[]}", "allOf must be a non-empty array");
    expect_error("{\"allOf\":[{\"type\":\"string\"},{}]}", "at /allOf/0: allOf of several: "
                 "an element's type must be object");
    expect_error("{\"allOf\":[{\"properties\":{}},{\"minItems\":1}]}",
                 "at /allOf/1: allOf of several merges object schemas only (properties, "
                 "required); this element has minItems");
    expect_error("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}}},"
                 "{\"properties\":{\"a\":{\"type\":\"integer\"}}}]}",
                 "two elements describe the property a");
    expect_error("{\"allOf\":[{},{\"additionalProperties\":{}}]}",
                 "at /allOf/1: allOf of several: additionalProperties in an element");
    expect_error("{\"allOf\":[{},[1]]}", "at /allOf/1: allOf of several: each element must");
    expect_error("{\"allOf\":[{},{\"$ref\":\"#/nowhere\"}]}", "does not resolve: #/nowhere");
    expect_error("{\"allOf\":[{},{\"required\":\"a\"}]}", "at /allOf/1: required must be");
    expect_error("{\"allOf\":[{\"properties\":[]},{}]}", "properties must be an object");
    expect_error("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"bad\"}}},{}]}",
                 "at /allOf/0/properties/a: unknown type bad");
    {
        /* 64 elements: one past what merges. */
        char many[1024] = "{\"allOf\":[{}";
        for (int i = 1; i < 64; i++) strcat(many, ",{}");
        strcat(many, "]}");
        expect_error(many, "more than 63 elements");
    }
    expect_error("{\"required\":[1]}", "required must be an array of strings");
    expect_error("{\"prefixItems\":[{},{}],\"maxItems\":1}", "below the prefixItems");
    expect_error("{\"type\":\"string\"} x", "text after the value");
    expect_error("{\"a\":\"\\ud800\"}", "surrogate");
    expect_error("{\"a\":\"\xff\"}", "invalid UTF-8");

    /* Nesting: 100 levels of JSON is refused by the parser's depth limit,
     * a chain of 300 references by the converter's, both as errors. */
    char deep[2048] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    expect_error(deep, "deeper than 64");
    size_t cap = 64 * 1024, n = 0;
    char *chain = malloc(cap);
    n += (size_t)snprintf(chain + n, cap - n, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(chain + n, cap - n, "%s\"d%d\":{\"$ref\":\"#/$defs/d%d\"}",
                              i ? "," : "", i, i + 1);
    snprintf(chain + n, cap - n, ",\"d300\":{\"type\":\"null\"}}}");
    expect_error(chain, "deeper than 256");
    /* ...while a chain of 100 is fine. */
    n = 0;
    n += (size_t)snprintf(chain + n, cap - n, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(chain + n, cap - n, "%s\"d%d\":{\"$ref\":\"#/$defs/d%d\"}",
                              i ? "," : "", i, i + 1);
    snprintf(chain + n, cap - n, ",\"d100\":{\"type\":\"null\"}}}");
    fx_grammar *g = convert(chain);
    assert_int_equal(match(g, "null"), 2);
    fx_grammar_free(g);
    free(chain);
}

/* ---- allocation failures: the Nth fails, alone or with all later ones ---- */

typedef struct faults {
    long count, fail_at;
    int sticky;
} faults;

static void *f_malloc(void *user, size_t size) {
    faults *f = user;
    long n = ++f->count;
    if (n == f->fail_at || (f->sticky && n > f->fail_at)) return NULL;
    return malloc(size);
}

static void *f_realloc(void *user, void *ptr, size_t size) {
    faults *f = user;
    long n = ++f->count;
    if (n == f->fail_at || (f->sticky && n > f->fail_at)) return NULL;
    return realloc(ptr, size);
}

static void f_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

/* Recursion through $ref, and each newer path that allocates: allOf
 * merged with a $ref, the extra keys' trie, an integer and a number
 * range, a pattern with groups and a class, a format. */
static const char *const alloc_schemas[] = {
    NULL, /* cases[10] */
    "{\"$defs\":{\"a\":{\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":-7,"
    "\"maximum\":1234}}}},\"allOf\":[{\"$ref\":\"#/$defs/a\"},{\"properties\":{\"xy\":"
    "{\"type\":\"number\",\"exclusiveMinimum\":-3,\"maximum\":9}},\"required\":[\"xy\"]},"
    "{\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":-7,\"maximum\":1234}}}],"
    "\"additionalProperties\":{\"type\":\"string\",\"pattern\":\"^(a|[^b-d]\\\\d{2,3})+$\"}}",
    "{\"properties\":{\"when\":{\"format\":\"date-time\"},\"id\":{\"format\":\"uuid\"}},"
    "\"additionalProperties\":true}",
};

static void alloc_failures(const char *schema) {
    for (int sticky = 0; sticky < 2; sticky++) {
        int succeeded = 0;
        for (long at = 1; at < 10000 && !succeeded; at++) {
            faults f = {0, at, sticky};
            fx_allocator hooks = {f_malloc, f_realloc, f_free, &f};
            fx_alloc fa;
            assert_int_equal(fx_alloc_init(&fa, &hooks), FX_OK);
            char *gbnf = NULL;
            fx_error err;
            fx_status st = fx_json_schema_to_gbnf(&fa, schema, strlen(schema), &gbnf, NULL, &err);
            if (st == FX_OK) {
                succeeded = 1;
                fx_free(&fa, gbnf);
            } else if (st != FX_ERR_NOMEM) {
                fail_msg("allocation %ld (%s): status %d: %s", at, sticky ? "and later" : "only",
                         st, err.message);
            } else {
                assert_null(gbnf);
            }
        }
        assert_true(succeeded);
    }
}

static void test_allocation_failures(void **state) {
    (void)state;
    alloc_failures(cases[10].schema);
    for (size_t i = 1; i < sizeof alloc_schemas / sizeof *alloc_schemas; i++) {
        fx_grammar_free(convert(alloc_schemas[i])); /* valid as it stands */
        alloc_failures(alloc_schemas[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests_name("json_schema", tests, schema_setup, schema_teardown);
}
