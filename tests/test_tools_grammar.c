/*
 * fx_tools_to_grammar: for each format, the grammar reads the format's
 * trigger first, accepts calls to the tools with arguments their schemas
 * allow (parallel ones where the format has them), and nothing else:
 * unknown names, wrong argument types, a missing required argument, the
 * other formats' markers. Bad tools are refused naming the tool; the
 * buffer contract holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "sample/grammar.h"
#include "test_json_schema_util.h" /* alloc, work, match(), setup */

static const fx_tool k_tools[] = {
    {"get_weather",
     "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
     "\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}"},
    {"open_door",
     "{\"type\": \"object\", \"properties\": {\"door\": {\"type\": \"integer\"}}, "
     "\"required\": [\"door\"]}"},
    {"wave", NULL},
};

static fx_grammar *tools_grammar(fx_tool_format format) {
    char buf[65536], errbuf[256];
    size_t needed = 0;
    if (fx_tools_to_grammar(k_tools, 3, format, buf, sizeof buf, &needed,
                            errbuf, sizeof errbuf) != FX_OK)
        fail_msg("format %d: %s", (int)format, errbuf);
    assert_int_equal(needed, strlen(buf) + 1);
    fx_grammar *g = NULL;
    fx_error err;
    if (fx_grammar_compile(&alloc, buf, strlen(buf), NULL, &g, &err) != FX_OK)
        fail_msg("format %d: %s\n%s", (int)format, err.message, buf);
    return g;
}

typedef struct format_case {
    fx_tool_format format;
    const char *whole[4];
    const char *bad[7]; /* NULL-terminated */
} format_case;

static const format_case k_cases[] = {
    {FX_TOOL_FORMAT_HERMES,
     {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
      "<tool_call>{\"name\": \"open_door\", \"arguments\": {\"door\": 3}}</tool_call>",
      "<tool_call>\n{\"name\": \"wave\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"c\"}}\n</tool_call>",
      NULL},
     {"<tool_call>\n{\"name\": \"fly\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"open_door\", \"arguments\": {\"door\": \"3\"}}",
      "<tool_call>\n{\"name\": \"open_door\", \"arguments\": {}}",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"unit\": \"k\"}}",
      "{\"name\": \"wave\", \"arguments\": {}}",
      "[TOOL_CALLS]"}},
    {FX_TOOL_FORMAT_LLAMA3,
     {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
      "{\"name\":\"open_door\",\"parameters\":{\"door\":12}}",
      "{\"name\": \"wave\", \"parameters\": {\"any\": [1, 2]}}",
      NULL},
     {"{\"name\": \"wave\", \"arguments\": {}}",
      "{\"name\": \"open_door\", \"parameters\": {\"door\": 1.5}}",
      "{\"parameters\": {}, \"name\": \"wave\"}",
      "<tool_call>",
      NULL}},
    {FX_TOOL_FORMAT_MISTRAL,
     {"[TOOL_CALLS][{\"name\": \"wave\", \"arguments\": {}}]",
      "[TOOL_CALLS][{\"name\": \"open_door\", \"arguments\": {\"door\": 1}}, "
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}]",
      NULL},
     {"[TOOL_CALLS]{\"name\": \"wave\", \"arguments\": {}}",
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}]",
      "[{\"name\": \"wave\", \"arguments\": {}}]",
      NULL}},
};

static void test_formats(void **state) {
    (void)state;
    for (size_t f = 0; f < sizeof k_cases / sizeof *k_cases; f++) {
        const format_case *c = &k_cases[f];
        fx_grammar *g = tools_grammar(c->format);
        /* A lazy grammar reads its trigger first. */
        const char *trigger = fx_tool_format_trigger(c->format);
        assert_non_null(trigger);
        assert_int_equal(match(g, trigger), 1);
        for (int i = 0; c->whole[i]; i++)
            if (match(g, c->whole[i]) != 2)
                fail_msg("format %d refuses %s", (int)c->format, c->whole[i]);
        for (int i = 0; c->bad[i]; i++)
            if (match(g, c->bad[i]) != 0)
                fail_msg("format %d takes %s", (int)c->format, c->bad[i]);
        fx_grammar_free(g);
    }
    assert_null(fx_tool_format_trigger((fx_tool_format)3));
}

static void test_refusals(void **state) {
    (void)state;
    char buf[16], errbuf[256];
    size_t needed = 0;
    assert_int_equal(fx_tools_to_grammar(NULL, 1, FX_TOOL_FORMAT_HERMES, NULL,
                                         0, &needed, errbuf, sizeof errbuf),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tools_to_grammar(k_tools, 0, FX_TOOL_FORMAT_HERMES,
                                         NULL, 0, &needed, NULL, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, (fx_tool_format)7, NULL,
                                         0, &needed, NULL, 0),
                     FX_ERR_INVALID_ARG);
    static fx_tool many[129];
    for (int i = 0; i < 129; i++) many[i] = (fx_tool){"wave", NULL};
    assert_int_equal(fx_tools_to_grammar(many, 129, FX_TOOL_FORMAT_HERMES,
                                         NULL, 0, &needed, NULL, 0),
                     FX_ERR_INVALID_ARG);
    const char *bad_names[] = {"", "has space", "quote\"", NULL,
                               "x123456789x123456789x123456789x123456789"
                               "x123456789x123456789x12345"};
    for (int i = 0; i < 5; i++) {
        fx_tool t = {bad_names[i], NULL};
        assert_int_equal(fx_tools_to_grammar(&t, 1, FX_TOOL_FORMAT_LLAMA3,
                                             NULL, 0, &needed, errbuf,
                                             sizeof errbuf),
                         FX_ERR_INVALID_ARG);
    }
    /* A schema outside the subset: the message names the tool. */
    fx_tool t[2] = {k_tools[0], {"broken", "{\"type\": \"object\", \"not\": {}}"}};
    assert_int_equal(fx_tools_to_grammar(t, 2, FX_TOOL_FORMAT_HERMES, NULL, 0,
                                         &needed, errbuf, sizeof errbuf),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(errbuf, "broken"));
    t[1].parameters = "{not json";
    assert_int_equal(fx_tools_to_grammar(t, 2, FX_TOOL_FORMAT_HERMES, NULL, 0,
                                         &needed, errbuf, sizeof errbuf),
                     FX_ERR_INVALID_ARG);
    /* The buffer contract: the size asked, then too small, then exact. */
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, FX_TOOL_FORMAT_MISTRAL,
                                         NULL, 0, &needed, NULL, 0),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_true(needed > sizeof buf);
    memset(buf, 'x', sizeof buf);
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, FX_TOOL_FORMAT_MISTRAL,
                                         buf, sizeof buf, NULL, NULL, 0),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(buf[0], '\0');
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, FX_TOOL_FORMAT_MISTRAL,
                                         NULL, 5, &needed, NULL, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, FX_TOOL_FORMAT_MISTRAL,
                                         NULL, 0, &needed, NULL, 0),
                     FX_ERR_BUFFER_TOO_SMALL);
    char *big = malloc(needed);
    assert_non_null(big);
    size_t again = 0;
    assert_int_equal(fx_tools_to_grammar(k_tools, 3, FX_TOOL_FORMAT_MISTRAL,
                                         big, needed, &again, NULL, 0),
                     FX_OK);
    assert_int_equal(again, needed);
    assert_int_equal(strlen(big) + 1, needed);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests_name("tools_grammar", tests, schema_setup,
                                       schema_teardown);
}
