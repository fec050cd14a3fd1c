/*
 * Chat templates rendered by the Jinja interpreter, through ferrox.h only
 * (issue 39).
 *
 * tests/data/chat/cases.tsv lists real models' templates (the 30 cases of
 * llama.cpp's tests/test-chat-template.cpp and the model templates kept in
 * llama.cpp's and ik_llama.cpp's models/templates/, Gemma 3's added), each
 * with a conversation and the text jinja2 renders for it, configured as
 * transformers configures it (tests/data/chat/README.md). Every case must
 * render byte for byte, or fail where jinja2 fails. Then: the models issue
 * 39 names one by one, BOS handling through fx_chat_apply_ex, its options
 * and errors, and end-of-turn markers derived from templates of no known
 * family.
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

#include "test_util.h"

/* The clock the expected outputs were made with: 2024-07-26 00:00 UTC. */
#define FIXED_NOW 1721952000

static char *read_data(const char *dir, const char *name, size_t *len) {
    char rel[512];
    if (strcmp(dir, ".") == 0) snprintf(rel, sizeof rel, "chat/%s", name);
    else snprintf(rel, sizeof rel, "chat/%s/%s", dir, name);
    char *text = fx_test_read_file(fx_test_data_path(rel), len);
    if (!text) fail_msg("cannot read tests/data/%s", rel);
    return text;
}

/* Splits a tab-separated line in place into at most n fields. */
static size_t split_tabs(char *line, char **fields, size_t n) {
    size_t k = 0;
    fields[k++] = line;
    for (char *p = line; *p && k < n; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[k++] = p + 1;
        }
    }
    return k;
}

typedef struct render_result {
    fx_status status;
    char *text;          /* malloc'd on FX_OK */
    char err[1024];
} render_result;

static render_result render_ex(const char *tmpl, const char *context,
                               uint32_t flags, const char *bos,
                               const char *eos) {
    render_result r = { FX_OK, NULL, "" };
    fx_chat_options opts;
    fx_chat_options_init(&opts);
    opts.flags = flags;
    opts.context_json = context;
    opts.now = FIXED_NOW;
    opts.bos_token = bos;
    opts.eos_token = eos;
    size_t needed = 0;
    r.status = fx_chat_apply_ex(NULL, tmpl, NULL, 0, &opts, NULL, 0, &needed,
                                r.err, sizeof r.err);
    if (r.status != FX_ERR_BUFFER_TOO_SMALL) return r;
    r.text = malloc(needed);
    assert_non_null(r.text);
    size_t again = 0;
    r.status = fx_chat_apply_ex(NULL, tmpl, NULL, 0, &opts, r.text, needed,
                                &again, r.err, sizeof r.err);
    if (r.status != FX_OK) {
        free(r.text);
        r.text = NULL;
        return r;
    }
    assert_int_equal(again, needed);
    assert_int_equal(strlen(r.text) + 1, needed);
    return r;
}

static void report_diff(const char *label, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fail_msg("%s: differs at byte %zu\n  expected ...%.80s\n  got      ...%.80s",
             label, i, want + from, got + from);
}

/* One row of cases.tsv; returns whether it rendered (not raised). */
static int run_case(char *line) {
    char *f[7];
    if (split_tabs(line, f, 7) != 7) fail_msg("bad cases.tsv line: %s", line);
    size_t n = 0;
    char *tmpl = read_data("templates", f[1], &n);
    char *context = read_data("contexts", f[2], &n);
    char *want = read_data("expected", f[6], &n);
    uint32_t flags = FX_CHAT_WITH_BOS |
                     (strcmp(f[3], "1") == 0 ? FX_CHAT_ADD_ASSISTANT : 0);
    render_result r = render_ex(tmpl, context, flags, f[4], f[5]);
    int raises = strstr(f[6], ".err") != NULL;
    if (raises) {
        if (r.status != FX_ERR_BAD_TEMPLATE)
            fail_msg("%s: jinja2 raises, ferrox gave %s", f[0],
                     fx_status_str(r.status));
        /* raise_exception's own text is in the message. */
        if (want[0] && !strstr(r.err, want))
            fail_msg("%s: message \"%s\" lacks \"%s\"", f[0], r.err, want);
    } else {
        if (r.status != FX_OK)
            fail_msg("%s: %s: %s", f[0], fx_status_str(r.status), r.err);
        if (strcmp(r.text, want) != 0) report_diff(f[0], want, r.text);
    }
    free(r.text);
    free(tmpl);
    free(context);
    free(want);
    return raises ? 0 : 1;
}

static void test_real_templates(void **state) {
    (void)state;
    size_t len = 0;
    char *tsv = fx_test_read_file(fx_test_data_path("chat/cases.tsv"), &len);
    assert_non_null(tsv);
    size_t cases = 0, rendered = 0, llamacpp = 0;
    for (char *line = tsv; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        if (line[0] != '#') {
            if (strncmp(line, "llamacpp-", 9) == 0) llamacpp++;
            rendered += (size_t)run_case(line);
            cases++;
        }
        line = end ? end + 1 : NULL;
    }
    free(tsv);
    print_message("%zu template cases, %zu rendered, %zu raised as jinja2 "
                  "does\n", cases, rendered, cases - rendered);
    assert_int_equal(llamacpp, 30);
    assert_true(cases >= 400);
}

/* ---- one behaviour at a time ---- */

/* tests/data/chat/semantics.txt: small templates, each followed by what
 * jinja2 renders for it ("%%%% expected") or that it raises ("%%%%
 * raises", with raise_exception's message if any), in the context of
 * semantics.json. */
static void test_semantics(void **state) {
    (void)state;
    size_t len = 0, n_ok = 0, n_raise = 0;
    char *ctx = read_data(".", "semantics.json", &len);
    char *all = read_data(".", "semantics.txt", &len);
    const char *mark_t = "%%%% template\n";
    char *p = strstr(all, mark_t);
    assert_non_null(p);
    while (p) {
        char *tmpl = p + strlen(mark_t);
        char *sep = strstr(tmpl, "\n%%%% ");
        assert_non_null(sep);
        *sep = '\0';
        char *kind = sep + 1;
        int raises = strncmp(kind, "%%%% raises\n", 12) == 0;
        char *want = kind + (raises ? 12 : 14);
        char *next = strstr(want, "\n%%%% ");
        assert_non_null(next);
        *next = '\0';
        render_result r = render_ex(tmpl, ctx, FX_CHAT_WITH_BOS, "<s>", "</s>");
        if (raises) {
            if (r.status != FX_ERR_BAD_TEMPLATE)
                fail_msg("%s: jinja2 raises, ferrox gave %s", tmpl,
                         fx_status_str(r.status));
            if (want[0] && !strstr(r.err, want))
                fail_msg("%s: message \"%s\" lacks \"%s\"", tmpl, r.err, want);
            n_raise++;
        } else {
            if (r.status != FX_OK)
                fail_msg("%s: %s: %s", tmpl, fx_status_str(r.status), r.err);
            if (strcmp(r.text, want) != 0) report_diff(tmpl, want, r.text);
            n_ok++;
        }
        free(r.text);
        p = strncmp(next + 1, "%%%% end", 8) == 0 ? NULL : next + 1;
        assert_true(p == NULL || strncmp(p, mark_t, strlen(mark_t)) == 0);
    }
    print_message("%zu semantics cases rendered, %zu raised\n", n_ok, n_raise);
    assert_true(n_ok + n_raise >= 90);
    free(ctx);
    free(all);
}

/* ---- the models issue 39 names, spelled out ---- */

static char *render_file(const char *template_file, const char *context,
                         uint32_t flags) {
    size_t n;
    char *tmpl = read_data("templates", template_file, &n);
    render_result r = render_ex(tmpl, context, flags, "<s>", "</s>");
    free(tmpl);
    if (r.status != FX_OK) fail_msg("%s: %s", template_file, r.err);
    return r.text;
}

static void expect_file(const char *template_file, const char *context,
                        uint32_t flags, const char *want) {
    char *got = render_file(template_file, context, flags);
    if (strcmp(got, want) != 0) report_diff(template_file, want, got);
    free(got);
}

#define THINK_CONV "{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}," \
    "{\"role\": \"assistant\", \"content\": \"<think>\\nr1\\n</think>\\n\\nA1\"}," \
    "{\"role\": \"user\", \"content\": \"Q2\"}]"

static void test_named_models(void **state) {
    (void)state;
    const uint32_t gen = FX_CHAT_ADD_ASSISTANT;
    /* Without FX_CHAT_WITH_BOS the leading bos_token ("<s>" here) is left
     * to the tokenizer. Qwen3: the earlier turn's reasoning is dropped; enable_thinking
     * false writes an empty think block for the model. */
    expect_file("Qwen-Qwen3-0.6B.jinja", THINK_CONV "}", gen,
                "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA1"
                "<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
                "<|im_start|>assistant\n");
    expect_file("Qwen-Qwen3-0.6B.jinja", THINK_CONV ", \"enable_thinking\": "
                "false}", gen,
                "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA1"
                "<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* Gemma 3: the system prompt opens the first user turn. */
    expect_file("google-gemma-3-it.jinja", "{\"messages\": [{\"role\": "
                "\"system\", \"content\": \"S\"}, {\"role\": \"user\", "
                "\"content\": \"U\"}]}", gen,
                "<start_of_turn>user\nS\n\nU<end_of_turn>\n"
                "<start_of_turn>model\n");
    /* Llama 3.2 with a system prompt: the knowledge date and today's date
     * from strftime_now (the fixed clock). */
    expect_file("meta-llama-Llama-3.2-3B-Instruct.jinja", "{\"messages\": "
                "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": "
                "\"user\", \"content\": \"U\"}]}", gen,
                "<|start_header_id|>system<|end_header_id|>\n\n"
                "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul "
                "2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
                "\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
                "\n\n");
    /* DeepSeek-R1-Distill-Qwen: only what follows </think> is kept (its
     * blank lines too), and
     * the generation prompt opens a think block. */
    expect_file("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", THINK_CONV "}",
                gen,
                "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c" "Assistant"
                "\xef\xbd\x9c>\n\nA1<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81"
                "sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>Q2"
                "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n");
    /* SmolLM3: /no_think in the system prompt turns reasoning off. */
    char *smol = render_file("HuggingFaceTB-SmolLM3-3B.jinja", "{\"messages\": "
                             "[{\"role\": \"system\", \"content\": \"S /no_think\"},"
                             " {\"role\": \"user\", \"content\": \"U\"}]}", gen);
    assert_non_null(strstr(smol, "/no_think"));
    assert_non_null(strstr(smol, "<|im_start|>user\nU<|im_end|>\n"));
    assert_non_null(strstr(smol, "<|im_start|>assistant\n<think>\n\n</think>\n"));
    free(smol);
}

/* ---- fx_chat_apply_ex's contract ---- */

static void test_apply_ex(void **state) {
    (void)state;
    const char *tmpl = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:"
                       "{{ m.content }}{{ m.extra | default('') }}]{% endfor %}"
                       "{% if add_generation_prompt %}>{% endif %}";
    const fx_chat_message msgs[] = { { "user", "hi", 0 } };
    char buf[256], err[256];
    size_t needed = 0;
    fx_chat_options opts;
    fx_chat_options_init(&opts);
    opts.bos_token = "<B>";
    /* The leading BOS text is dropped unless FX_CHAT_WITH_BOS. */
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_OK);
    assert_string_equal(buf, "[user:hi]");
    opts.flags = FX_CHAT_WITH_BOS | FX_CHAT_ADD_ASSISTANT;
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_OK);
    assert_string_equal(buf, "<B>[user:hi]>");
    /* Messages with any fields and roles, from the context. */
    opts.flags = 0;
    opts.context_json = "{\"messages\": [{\"role\": \"tool\", \"content\": "
                        "\"r\", \"extra\": 7}]}";
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, NULL, 0, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_OK);
    assert_string_equal(buf, "[tool:r7]");
    /* Messages twice, or not at all; a context that is not an object or
     * not JSON; a context for a family name. */
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "twice"));
    assert_string_equal(buf, "");
    opts.context_json = "{\"enable_thinking\": true}";
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, NULL, 0, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    opts.context_json = "[1]";
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "object"));
    opts.context_json = "{\"a\": [1, 2}";
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "JSON"));
    opts.context_json = "{\"a\": \"x\\u0000y\"}";
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "NUL"));
    opts.context_json = "{}";
    assert_int_equal(fx_chat_apply_ex(NULL, "chatml", msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    /* strftime_now is defined by _ex only, on the caller's clock. */
    opts.context_json = NULL;
    const char *date = "{{ strftime_now('%Y-%m-%d %b %-d') }}";
    assert_int_equal(fx_chat_apply_ex(NULL, date, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_OK);
    opts.now = FIXED_NOW;
    assert_int_equal(fx_chat_apply_ex(NULL, date, msgs, 1, &opts, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_OK);
    assert_string_equal(buf, "2024-07-26 Jul 26");
    assert_int_equal(fx_chat_apply(NULL, "{{ strftime_now is defined }}",
                                   msgs, 1, 0, buf, sizeof buf, &needed),
                     FX_OK);
    assert_string_equal(buf, "False");
    /* transformers' {% generation %} marks the assistant's text for
     * training masks; rendering keeps its body. */
    assert_int_equal(fx_chat_apply(NULL, "{% for m in messages %}"
                                   "{% generation %}<{{ m.content }}>"
                                   "{% endgeneration %}{% endfor %}", msgs, 1,
                                   0, buf, sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, "<hi>");
    /* A newer caller's struct with an unknown member set is refused. */
    unsigned char big[sizeof(fx_chat_options) + 16];
    memset(big, 0, sizeof big);
    fx_chat_options_init_sized((fx_chat_options *)(void *)big, sizeof big);
    big[sizeof(fx_chat_options) + 3] = 1;
    assert_int_equal(fx_chat_apply_ex(NULL, tmpl, msgs, 1,
                                      (fx_chat_options *)(void *)big, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_UNSUPPORTED);
    /* No template and no model. */
    assert_int_equal(fx_chat_apply_ex(NULL, NULL, msgs, 1, NULL, buf,
                                      sizeof buf, &needed, err, sizeof err),
                     FX_ERR_INVALID_ARG);
}

/* ---- end-of-turn markers of templates no family matches ---- */

static void test_derived_stops(void **state) {
    (void)state;
    static const struct { const char *file, *stop; } cases[] = {
        { "llamacpp-11.jinja", "<|END_OF_TURN_TOKEN|>" }, /* Command-R+ */
        { "llamacpp-18.jinja", "<|user|>" },              /* ChatGLM 4 */
        { "llamacpp-22.jinja", "<|end_of_text|>" },       /* Granite 3.0 */
        { "llamacpp-28.jinja", "<|turn_end|>" },          /* Megrez */
        { "llamacpp-07.jinja", "<|end_of_turn|>" },       /* OpenChat */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0;
        char *tmpl = read_data("templates", cases[i].file, &n);
        const char *family = NULL, *s[8];
        assert_int_equal(fx_chat_detect(NULL, tmpl, &family), FX_OK);
        assert_string_equal(family, "jinja");
        assert_int_equal(fx_chat_stop_strings(tmpl, s, 8, &n), FX_OK);
        if (n != 1 || strcmp(s[0], cases[i].stop) != 0)
            fail_msg("%s: %zu stops, first %s, want %s", cases[i].file, n,
                     n ? s[0] : "-", cases[i].stop);
        free(tmpl);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
        cmocka_unit_test(test_semantics),
        cmocka_unit_test(test_named_models),
        cmocka_unit_test(test_apply_ex),
        cmocka_unit_test(test_derived_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
