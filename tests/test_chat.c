/*
 * Chat templates through include/ferrox.h only (issue 11).
 *
 * For each family: the template its authors publish (test_chat_templates.c)
 * and the conversation system, user, assistant, user rendered to the text
 * written out below by hand from the family's documented format. Then the
 * family names, the BOS rule, buffer sizing, bad input (each a status, no
 * crash), and a model carrying its own template and end-of-turn tokens.
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

#include "fault_alloc.h"
#include "gguf_writer.h"
#include "test_util.h"

extern const char T_QWEN2_5[], T_SMOLLM2[], T_LLAMA2[], T_MISTRAL[],
    T_MISTRAL_V1[], T_MISTRAL_V3[], T_MISTRAL_V3_TEKKEN[], T_LLAMA3[],
    T_LLAMA3_2[], T_PHI3_5[], T_TINYLLAMA[], T_GEMMA2[], T_GEMMA3[],
    T_DEEPSEEK_CODER[], T_DEEPSEEK_R1[], T_VICUNA[], T_VICUNA_ORCA[],
    T_QWEN3[], T_PHI3_SMALL[];

#define SYS "You are a helpful assistant."
static const fx_chat_message conv4[] = {
    { "system", SYS, 0 },
    { "user", "Hello", 0 },
    { "assistant", "Hi there", 0 },
    { "user", "Who are you?", 0 },
};

/* U+FF5C and U+2581, DeepSeek's special-token spelling. */
#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

#define L3(role, text) \
    "<|start_header_id|>" role "<|end_header_id|>\n\n" text "<|eot_id|>"

typedef struct family_case {
    const char *label;
    const char *tmpl;
    const char *family;     /* what the template is recognized as */
    const char *expected;   /* conv4 with the assistant opener */
    /* The template text raises on conv4's system message (rendered exactly,
     * by the interpreter): this is in the message. The family name keeps
     * ferrox's documented departure and renders `expected`. */
    const char *text_raises;
} family_case;

static const family_case cases[] = {
    { "Qwen2.5", T_QWEN2_5, "chatml",
      "<|im_start|>system\n" SYS "<|im_end|>\n"
      "<|im_start|>user\nHello<|im_end|>\n"
      "<|im_start|>assistant\nHi there<|im_end|>\n"
      "<|im_start|>user\nWho are you?<|im_end|>\n"
      "<|im_start|>assistant\n", NULL },
    { "Qwen3", T_QWEN3, "qwen3",
      "<|im_start|>system\n" SYS "<|im_end|>\n"
      "<|im_start|>user\nHello<|im_end|>\n"
      "<|im_start|>assistant\nHi there<|im_end|>\n"
      "<|im_start|>user\nWho are you?<|im_end|>\n"
      "<|im_start|>assistant\n", NULL },
    { "Llama 2", T_LLAMA2, "llama2",
      "[INST] <<SYS>>\n" SYS "\n<</SYS>>\n\nHello [/INST] Hi there </s>"
      "<s>[INST] Who are you? [/INST]", NULL },
    { "Mistral v0.2", T_MISTRAL, "mistral",
      "[INST] " SYS "\n\nHello [/INST]Hi there</s>[INST] Who are you? [/INST]",
      "roles must alternate" },
    { "Mistral v1", T_MISTRAL_V1, "mistral-v1",
      " [INST] " SYS "\n\nHello [/INST] Hi there</s> [INST] Who are you? "
      "[/INST]", NULL },
    { "Mistral v3", T_MISTRAL_V3, "mistral-v3",
      "[INST] Hello[/INST] Hi there</s>[INST] " SYS "\n\nWho are you?[/INST]", NULL },
    { "Mistral v3-tekken", T_MISTRAL_V3_TEKKEN, "mistral-v3-tekken",
      "[INST]Hello[/INST]Hi there</s>[INST]" SYS "\n\nWho are you?[/INST]", NULL },
    { "Llama 3", T_LLAMA3, "llama3",
      L3("system", SYS) L3("user", "Hello") L3("assistant", "Hi there")
      L3("user", "Who are you?")
      "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL },
    { "Llama 3.2", T_LLAMA3_2, "llama3.1",
      L3("system", "Cutting Knowledge Date: December 2023\n"
                   "Today Date: 26 Jul 2024\n\n" SYS)
      L3("user", "Hello") L3("assistant", "Hi there")
      L3("user", "Who are you?")
      "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL },
    { "Phi-3.5", T_PHI3_5, "phi3",
      "<|system|>\n" SYS "<|end|>\n<|user|>\nHello<|end|>\n"
      "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you?<|end|>\n"
      "<|assistant|>\n", NULL },
    { "Phi-3-small", T_PHI3_SMALL, "phi3",
      "<|system|>\n" SYS "<|end|>\n<|user|>\nHello<|end|>\n"
      "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you?<|end|>\n"
      "<|assistant|>\n", NULL },
    { "TinyLlama (zephyr)", T_TINYLLAMA, "zephyr",
      "<|system|>\n" SYS "</s>\n<|user|>\nHello</s>\n"
      "<|assistant|>\nHi there</s>\n<|user|>\nWho are you?</s>\n"
      "<|assistant|>\n", NULL },
    /* Gemma 2's template raises on a system message; the "gemma" family
     * writes it as Gemma 3's template does, so both render the same. */
    { "Gemma 2", T_GEMMA2, "gemma",
      "<start_of_turn>user\n" SYS "\n\nHello<end_of_turn>\n"
      "<start_of_turn>model\nHi there<end_of_turn>\n"
      "<start_of_turn>user\nWho are you?<end_of_turn>\n"
      "<start_of_turn>model\n",
      "System role not supported" },
    { "Gemma 3", T_GEMMA3, "gemma",
      "<start_of_turn>user\n" SYS "\n\nHello<end_of_turn>\n"
      "<start_of_turn>model\nHi there<end_of_turn>\n"
      "<start_of_turn>user\nWho are you?<end_of_turn>\n"
      "<start_of_turn>model\n", NULL },
    { "deepseek-coder", T_DEEPSEEK_CODER, "deepseek",
      SYS "### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n"
      "### Instruction:\nWho are you?\n### Response:\n", NULL },
    { "DeepSeek-R1", T_DEEPSEEK_R1, "deepseek3",
      SYS DS_USER "Hello" DS_ASSISTANT "Hi there" DS_EOS
      DS_USER "Who are you?" DS_ASSISTANT, NULL },
    { "Vicuna", T_VICUNA, "vicuna",
      SYS "\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you?\n"
      "ASSISTANT:", NULL },
    { "Orca-Vicuna", T_VICUNA_ORCA, "vicuna-orca",
      "SYSTEM: " SYS "\nUSER: Hello\nASSISTANT: Hi there</s>\n"
      "USER: Who are you?\nASSISTANT:", NULL },
};

/* Renders and returns a malloc'd prompt, asking for the size first. */
static char *render(const char *tmpl, const fx_chat_message *msgs, size_t n,
                    uint32_t flags, fx_status *status, char *err,
                    size_t err_size) {
    size_t needed = 0;
    fx_status st = fx_chat_apply_template(tmpl, msgs, n, flags, NULL, 0,
                                          &needed, err, err_size);
    if (st != FX_ERR_BUFFER_TOO_SMALL) {
        *status = st;
        return NULL;
    }
    char *buf = malloc(needed);
    assert_non_null(buf);
    size_t again = 0;
    st = fx_chat_apply_template(tmpl, msgs, n, flags, buf, needed, &again,
                                err, err_size);
    *status = st;
    if (st != FX_OK) {
        free(buf);
        return NULL;
    }
    assert_int_equal(again, needed);
    assert_int_equal(strlen(buf) + 1, needed);
    return buf;
}

static void expect_render(const char *label, const char *tmpl,
                          const fx_chat_message *msgs, size_t n,
                          uint32_t flags, const char *expected) {
    fx_status st;
    char err[512] = "";
    char *out = render(tmpl, msgs, n, flags, &st, err, sizeof err);
    if (st != FX_OK)
        fail_msg("%s: %s: %s", label, fx_status_str(st), err);
    if (strcmp(out, expected) != 0)
        fail_msg("%s:\n  got      \"%s\"\n  expected \"%s\"", label, out,
                 expected);
    free(out);
}

static void expect_error(const char *tmpl, const fx_chat_message *msgs,
                         size_t n, uint32_t flags, fx_status want,
                         const char *in_message);

static void test_families(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const family_case *c = &cases[i];
        const char *family = NULL;
        assert_int_equal(fx_chat_detect(NULL, c->tmpl, &family), FX_OK);
        if (strcmp(family, c->family) != 0)
            fail_msg("%s recognized as %s, not %s", c->label, family,
                     c->family);
        if (c->text_raises)
            expect_error(c->tmpl, conv4, 4, FX_CHAT_ADD_ASSISTANT,
                         FX_ERR_BAD_TEMPLATE, c->text_raises);
        else
            expect_render(c->label, c->tmpl, conv4, 4, FX_CHAT_ADD_ASSISTANT,
                          c->expected);
        /* The family's name stands for the same reference template. */
        expect_render(c->family, c->family, conv4, 4, FX_CHAT_ADD_ASSISTANT,
                      c->expected);
    }
}

static void test_default_system_prompts(void **state) {
    (void)state;
    const fx_chat_message *nosys = conv4 + 1;
    expect_render("Qwen2.5 without system", T_QWEN2_5, nosys, 3,
                  FX_CHAT_ADD_ASSISTANT,
                  "<|im_start|>system\nYou are Qwen, created by Alibaba "
                  "Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHello<|im_end|>\n"
                  "<|im_start|>assistant\nHi there<|im_end|>\n"
                  "<|im_start|>user\nWho are you?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_render("SmolLM2 without system", T_SMOLLM2, nosys, 1, 0,
                  "<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n"
                  "<|im_start|>user\nHello<|im_end|>\n");
    /* Plain ChatML has no default. */
    expect_render("chatml without system", "chatml", nosys, 1, 0,
                  "<|im_start|>user\nHello<|im_end|>\n");
    expect_render("deepseek-coder without system", T_DEEPSEEK_CODER, nosys, 1,
                  FX_CHAT_ADD_ASSISTANT,
                  "You are an AI programming assistant, utilizing the "
                  "Deepseek Coder model, developed by Deepseek Company, and "
                  "you only answer questions related to computer science. "
                  "For politically sensitive questions, security and privacy "
                  "issues, and other non-computer science questions, you "
                  "will refuse to answer\n### Instruction:\nHello\n"
                  "### Response:\n");
    expect_render("Llama 3.2 without system", T_LLAMA3_2, nosys, 1,
                  FX_CHAT_ADD_ASSISTANT,
                  L3("system", "Cutting Knowledge Date: December 2023\n"
                               "Today Date: 26 Jul 2024\n\n")
                  L3("user", "Hello")
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Without the opener, and the per-family whitespace rules. */
static void test_opener_and_whitespace(void **state) {
    (void)state;
    const fx_chat_message ws[] = {
        { "system", "  sys \n", 0 },
        { "user", "  Hello \n", 0 },
        { "assistant", "   I am an assistant   ", 0 },
        { "user", " \t", 0 },
    };
    /* Llama 2 strips the whole first turn, system block included: the
     * user's leading blanks stay, and a blank last turn strips to "". */
    expect_render("llama2 ws", T_LLAMA2, ws, 4, 0,
                  "[INST] <<SYS>>\n  sys \n\n<</SYS>>\n\n  Hello [/INST] "
                  "I am an assistant </s><s>[INST]  [/INST]");
    /* Llama 3 trims every message. */
    expect_render("llama3 ws", T_LLAMA3, ws, 4, 0,
                  L3("system", "sys") L3("user", "Hello")
                  L3("assistant", "I am an assistant") L3("user", ""));
    /* Python's strip() knows Unicode blanks: NBSP, ideographic space,
     * em space, line separator, NEL. */
    const fx_chat_message uni[] = {
        { "user", "\xc2\xa0\xe3\x80\x80Hi\xe2\x80\x83\xe2\x80\xa8", 0 },
        { "assistant", "\xc2\x85ok\xc2\xa0", 0 },
    };
    expect_render("gemma unicode ws", "gemma", uni, 2, 0,
                  "<start_of_turn>user\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nok<end_of_turn>\n");
    /* Phi-3.5 writes eos_token when no opener is asked for. */
    expect_render("phi3 no opener", T_PHI3_5, conv4 + 1, 1, 0,
                  "<|user|>\nHello<|end|>\n<|endoftext|>");
    /* R1 keeps only what follows </think> in an assistant message. */
    const fx_chat_message think[] = {
        { "user", "Q", 0 },
        { "assistant", "<think>hmm</think>\n\nAnswer", 0 },
        { "user", "Q2", 0 },
    };
    expect_render("deepseek3 think", T_DEEPSEEK_R1, think, 3,
                  FX_CHAT_ADD_ASSISTANT,
                  DS_USER "Q" DS_ASSISTANT "\n\nAnswer" DS_EOS DS_USER "Q2"
                  DS_ASSISTANT);
    /* Qwen3 drops reasoning before the last user query and keeps it,
     * re-spaced, after it. */
    const fx_chat_message q3[] = {
        { "user", "Q", 0 },
        { "assistant", "<think>\nr1\n</think>\n\nA1", 0 },
        { "user", "Q2", 0 },
        { "assistant", "<think>r2</think>A2", 0 },
    };
    expect_render("qwen3 think", T_QWEN3, q3, 4, 0,
                  "<|im_start|>user\nQ<|im_end|>\n"
                  "<|im_start|>assistant\nA1<|im_end|>\n"
                  "<|im_start|>user\nQ2<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2"
                  "<|im_end|>\n");
    /* Bytes that are not UTF-8 are never blanks and pass through. */
    const fx_chat_message raw[] = { { "user", "\x80 a \xc2", 0 } };
    expect_render("llama3 invalid utf-8", "llama3", raw, 1, 0,
                  L3("user", "\x80 a \xc2"));
    /* An explicit length may cover part of a longer string. */
    const fx_chat_message part[] = { { "user", "Hello, world", 5 } };
    expect_render("content_len", "chatml", part, 1, 0,
                  "<|im_start|>user\nHello<|im_end|>\n");
}

/* The leading BOS is left to the tokenizer unless asked for. */
static void test_bos(void **state) {
    (void)state;
    const fx_chat_message one[] = { { "user", "Hi", 0 } };
    expect_render("llama3 with BOS", T_LLAMA3, one, 1, FX_CHAT_WITH_BOS,
                  "<|begin_of_text|>" L3("user", "Hi"));
    expect_render("llama2 with BOS", "llama2", one, 1, FX_CHAT_WITH_BOS,
                  "<s>[INST] Hi [/INST]");
    expect_render("gemma with BOS", T_GEMMA3, one, 1, FX_CHAT_WITH_BOS,
                  "<bos><start_of_turn>user\nHi<end_of_turn>\n");
    /* ChatML and zephyr have no BOS in the template: nothing to add. */
    expect_render("chatml with BOS", "chatml", one, 1, FX_CHAT_WITH_BOS,
                  "<|im_start|>user\nHi<|im_end|>\n");
    expect_render("zephyr with BOS", T_TINYLLAMA, one, 1, FX_CHAT_WITH_BOS,
                  "<|user|>\nHi</s>\n");
}

static void test_family_list(void **state) {
    (void)state;
    static const char *const required[] = { "chatml", "llama2", "llama3",
        "mistral", "phi3", "zephyr", "gemma", "deepseek", "vicuna" };
    size_t n = fx_chat_family_count();
    assert_true(n >= 9);
    assert_null(fx_chat_family_name(n));
    assert_null(fx_chat_family_name((size_t)-1));
    for (size_t i = 0; i < n; i++) {
        const char *name = fx_chat_family_name(i), *family = NULL;
        assert_non_null(name);
        assert_int_equal(fx_chat_detect(NULL, name, &family), FX_OK);
        assert_string_equal(family, name);
        /* Every family renders the four-message conversation. */
        fx_status st;
        char err[512];
        char *out = render(name, conv4, 4, FX_CHAT_ADD_ASSISTANT, &st, err,
                           sizeof err);
        if (st != FX_OK) fail_msg("%s: %s", name, err);
        assert_true(strstr(out, "Who are you?") != NULL);
        free(out);
    }
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const char *family = NULL;
        assert_int_equal(fx_chat_detect(NULL, required[i], &family), FX_OK);
    }
}

static void test_stop_strings(void **state) {
    (void)state;
    const char *s[8];
    size_t n = 0;
    assert_int_equal(fx_chat_stop_strings(T_QWEN2_5, s, 8, &n), FX_OK);
    assert_true(n >= 1);
    assert_string_equal(s[0], "<|im_end|>");
    assert_int_equal(fx_chat_stop_strings("llama3.1", s, 8, &n), FX_OK);
    assert_string_equal(s[0], "<|eot_id|>");
    assert_int_equal(fx_chat_stop_strings(T_GEMMA2, s, 8, &n), FX_OK);
    assert_string_equal(s[0], "<end_of_turn>");
    assert_int_equal(fx_chat_stop_strings(T_PHI3_5, s, 8, &n), FX_OK);
    assert_string_equal(s[0], "<|end|>");
    assert_int_equal(fx_chat_stop_strings(T_DEEPSEEK_CODER, s, 8, &n), FX_OK);
    assert_string_equal(s[0], "<|EOT|>");
    assert_int_equal(fx_chat_stop_strings("llama3", s, 0, &n),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_true(n >= 1);
    /* Text that is a template without markers has no stop strings; text
     * that does not parse is refused. */
    assert_int_equal(fx_chat_stop_strings("garbage", s, 8, &n), FX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(fx_chat_stop_strings("{% if %}", s, 8, &n),
                     FX_ERR_BAD_TEMPLATE);
    /* A template of no family: the marker after an assistant turn,
     * derived by rendering it (Command-R's, ChatGLM 4's next-role one). */
    assert_int_equal(fx_chat_stop_strings(
        "{% for m in messages %}<|START_OF_TURN_TOKEN|>{{ m.content }}"
        "<|END_OF_TURN_TOKEN|>{% endfor %}", s, 8, &n), FX_OK);
    assert_int_equal(n, 1);
    assert_string_equal(s[0], "<|END_OF_TURN_TOKEN|>");
    assert_int_equal(fx_chat_stop_strings(
        "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}"
        "{% endfor %}", s, 8, &n), FX_OK);
    assert_int_equal(n, 1);
    assert_string_equal(s[0], "<|user|>");
    assert_int_equal(fx_chat_stop_strings(NULL, s, 8, &n), FX_ERR_INVALID_ARG);
}

static void test_buffer_sizes(void **state) {
    (void)state;
    const char *want = "<|im_start|>user\nHello<|im_end|>\n"
                       "<|im_start|>assistant\n";
    size_t len = strlen(want), needed = 0;
    char buf[128];
    memset(buf, 'x', sizeof buf);
    assert_int_equal(fx_chat_apply(NULL, "chatml", conv4 + 1, 1,
                                   FX_CHAT_ADD_ASSISTANT, buf, len, &needed),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(needed, len + 1);
    assert_string_equal(buf, ""); /* never a truncated prompt */
    assert_int_equal(fx_chat_apply(NULL, "chatml", conv4 + 1, 1,
                                   FX_CHAT_ADD_ASSISTANT, buf, len + 1,
                                   &needed), FX_OK);
    assert_string_equal(buf, want);
    /* needed may be NULL; buf NULL with a size is an error. */
    assert_int_equal(fx_chat_apply(NULL, "chatml", conv4 + 1, 1, 0, buf,
                                   sizeof buf, NULL), FX_OK);
    assert_int_equal(fx_chat_apply(NULL, "chatml", conv4 + 1, 1, 0, NULL, 10,
                                   &needed), FX_ERR_INVALID_ARG);
}

static void expect_error(const char *tmpl, const fx_chat_message *msgs,
                         size_t n, uint32_t flags, fx_status want,
                         const char *in_message) {
    char buf[256], err[512] = "";
    size_t needed = 7;
    fx_status st = fx_chat_apply_template(tmpl, msgs, n, flags, buf,
                                          sizeof buf, &needed, err,
                                          sizeof err);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", fx_status_str(want),
                 fx_status_str(st), err);
    assert_string_equal(buf, "");
    assert_true(err[0] != '\0');
    if (in_message && !strstr(err, in_message))
        fail_msg("message \"%s\" does not mention \"%s\"", err, in_message);
}

static void test_bad_input(void **state) {
    (void)state;
    /* Empty list; NULL list. */
    expect_error("chatml", conv4, 0, 0, FX_ERR_INVALID_ARG, "empty");
    expect_error("chatml", NULL, 2, 0, FX_ERR_INVALID_ARG, "NULL");
    /* Unknown and missing roles, NULL content. */
    const fx_chat_message tool[] = { { "user", "a", 0 }, { "tool", "b", 0 } };
    expect_error("chatml", tool, 2, 0, FX_ERR_INVALID_ARG, "\"tool\"");
    const fx_chat_message norole[] = { { NULL, "a", 0 } };
    expect_error("chatml", norole, 1, 0, FX_ERR_INVALID_ARG, "role");
    const fx_chat_message nocontent[] = { { "user", NULL, 0 } };
    expect_error("chatml", nocontent, 1, 0, FX_ERR_INVALID_ARG, "content");
    /* A NUL inside an explicit length. */
    const fx_chat_message nul[] = { { "user", "ab\0cd", 5 } };
    expect_error("chatml", nul, 1, 0, FX_ERR_INVALID_ARG, "NUL");
    /* Unknown flags. */
    expect_error("chatml", conv4, 1, 0x80, FX_ERR_INVALID_ARG, "flags");
    /* Templates that are not text or do not parse: a status with the
     * place and the reason, never a guess. */
    expect_error("\x01\xff garbage \xfe", conv4, 4, 0, FX_ERR_BAD_TEMPLATE,
                 "UTF-8");
    expect_error("", conv4, 4, 0, FX_ERR_BAD_TEMPLATE, "empty");
    expect_error("{% for m in messages %}{{ m.content }}", conv4, 4, 0,
                 FX_ERR_BAD_TEMPLATE, "endfor");
    expect_error("{{ messages[0].content + }}", conv4, 4, 0,
                 FX_ERR_BAD_TEMPLATE, "line 1 column 26");
    expect_error("{% nonsense %}", conv4, 4, 0, FX_ERR_BAD_TEMPLATE,
                 "nonsense");
    /* Near misses of the families are rendered as they are written:
     * ferrox runs the template instead of guessing at it. */
    expect_render("no family", "{% for m in messages %}{{ m.content }}|"
                  "{% endfor %}", conv4, 4, 0,
                  SYS "|Hello|Hi there|Who are you?|");
    expect_render("Llama 2 look-alike", "[INST] <<SYS>> something else",
                  conv4, 4, 0, "[INST] <<SYS>> something else");
    expect_render("first Phi-3", "{{ bos_token }}{% for message in messages "
                  "%}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' "
                  "+ message['content'] + '<|end|>' + '\n' + '<|assistant|>' "
                  "+ '\n'}}{% endif %}{% endfor %}", conv4, 4, 0,
                  "<|user|>\nHello<|end|>\n<|assistant|>\n"
                  "<|user|>\nWho are you?<|end|>\n<|assistant|>\n");
    /* No template and no model. */
    assert_int_equal(fx_chat_apply(NULL, NULL, conv4, 4, 0, NULL, 0, NULL),
                     FX_ERR_INVALID_ARG);
    const char *family = "x";
    assert_int_equal(fx_chat_detect(NULL, NULL, &family), FX_ERR_INVALID_ARG);
    assert_null(family);
    /* Conversations the template raises on. */
    const fx_chat_message twice[] = { { "user", "a", 0 }, { "user", "b", 0 } };
    expect_error(T_LLAMA2, twice, 2, 0, FX_ERR_BAD_TEMPLATE, "alternate");
    expect_error("gemma", twice, 2, 0, FX_ERR_BAD_TEMPLATE, "alternate");
    const fx_chat_message late_sys[] = { { "user", "a", 0 },
        { "assistant", "b", 0 }, { "system", "c", 0 } };
    expect_error("mistral-v3", late_sys, 3, 0, FX_ERR_BAD_TEMPLATE, "system");
    /* A count no memory could hold. */
    expect_error("chatml", conv4, SIZE_MAX / 4, 0, FX_ERR_TOO_LARGE,
                 "messages");
    const fx_chat_message ass_first[] = { { "assistant", "a", 0 } };
    expect_error("mistral", ass_first, 1, 0, FX_ERR_BAD_TEMPLATE, "alternate");
}

/* A 10 MB message and many small ones: sizes are exact, nothing breaks. */
static void test_large_input(void **state) {
    (void)state;
    size_t big = 10u * 1024 * 1024;
    char *text = malloc(big + 1);
    assert_non_null(text);
    memset(text, 'a', big);
    text[big] = '\0';
    const fx_chat_message m[] = { { "system", "s", 0 }, { "user", text, 0 } };
    for (size_t f = 0; f < fx_chat_family_count(); f++) {
        size_t needed = 0;
        fx_status st = fx_chat_apply(NULL, fx_chat_family_name(f), m, 2,
                                     FX_CHAT_ADD_ASSISTANT, NULL, 0, &needed);
        assert_int_equal(st, FX_ERR_BUFFER_TOO_SMALL);
        assert_true(needed > big && needed < big + 1024);
    }
    fx_status st;
    char err[512];
    char *out = render("llama3", m, 2, FX_CHAT_ADD_ASSISTANT, &st, err,
                       sizeof err);
    assert_int_equal(st, FX_OK);
    assert_true(strstr(out, "<|end_header_id|>\n\naaaa") != NULL);
    free(out);
    /* The same text with an explicit length. */
    const fx_chat_message ml[] = { { "user", text, big } };
    out = render("chatml", ml, 1, 0, &st, err, sizeof err);
    assert_int_equal(st, FX_OK);
    assert_int_equal(strlen(out), big + strlen("<|im_start|>user\n<|im_end|>\n"));
    free(out);
    free(text);

    size_t n = 200000;
    fx_chat_message *many = calloc(n, sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i < n; i++) {
        many[i].role = (i % 2 == 0) ? "user" : "assistant";
        many[i].content = "x";
    }
    size_t needed = 0;
    assert_int_equal(fx_chat_apply(NULL, "llama2", many, n, 0, NULL, 0,
                                   &needed), FX_ERR_BUFFER_TOO_SMALL);
    /* "<s>[INST] x [/INST]" per user turn (the first without <s>) and
     * " x </s>" per assistant turn. */
    assert_int_equal(needed, (n / 2) * (19 + 7) - 3 + 1);
    /* The same conversation through the interpreter: its budgets grow
     * with the conversation, so a long one is never refused. Each turn is
     * <|start_header_id|>role<|end_header_id|>\n\nx<|eot_id|>. */
    assert_int_equal(fx_chat_apply(NULL, T_LLAMA3, many, n, 0, NULL, 0,
                                   &needed), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(needed, (n / 2) * (53 + 58) + 1);
    free(many);
}

/* ---- a model that carries its own template and chat tokens ---- */

typedef struct vocab_spec {
    uint32_t n_vocab;
    const char *tmpl;   /* NULL: no tokenizer.chat_template */
} vocab_spec;

static size_t chat_vocab(gw_buf *b, void *user) {
    const vocab_spec *v = user;
    static const char *const named[] = { "<unk>", "<s>", "</s>",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>" };
    size_t n_named = sizeof named / sizeof named[0];
    const char **tokens = calloc(v->n_vocab, sizeof *tokens);
    char (*plain)[16] = calloc(v->n_vocab, sizeof *plain);
    float *scores = calloc(v->n_vocab, sizeof *scores);
    int32_t *types = calloc(v->n_vocab, sizeof *types);
    assert_true(tokens && plain && scores && types);
    for (uint32_t i = 0; i < v->n_vocab; i++) {
        if (i < n_named) {
            tokens[i] = named[i];
            types[i] = i == 0 ? 2 : 3;
        } else {
            snprintf(plain[i], sizeof plain[i], "<t%u>", i);
            tokens[i] = plain[i];
            types[i] = 1;
        }
        scores[i] = -(float)i;
    }
    size_t n_kv = 0;
    gw_kv_str(b, "tokenizer.ggml.model", "llama"), n_kv++;
    gw_kv_arr_str(b, "tokenizer.ggml.tokens", tokens, v->n_vocab), n_kv++;
    gw_kv_arr_f32(b, "tokenizer.ggml.scores", scores, v->n_vocab), n_kv++;
    gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, v->n_vocab), n_kv++;
    gw_kv_u32(b, "tokenizer.ggml.bos_token_id", 1), n_kv++;
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 2), n_kv++;
    gw_kv_u32(b, "tokenizer.ggml.unknown_token_id", 0), n_kv++;
    if (v->tmpl) gw_kv_str(b, "tokenizer.chat_template", v->tmpl), n_kv++;
    free(tokens);
    free(plain);
    free(scores);
    free(types);
    return n_kv;
}

static fx_model *load_chat_model(const char *tmpl, const char *name) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    vocab_spec v = { spec.n_vocab, tmpl };
    spec.extra_kv = chat_vocab;
    spec.extra_user = &v;
    const char *path = fx_test_tmp_path(name);
    assert_int_equal(gw_write_model(path, &spec), 0);
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    fx_model *model = NULL;
    char err[512];
    fx_status st = fx_model_load(path, &params, &model, err, sizeof err);
    if (st != FX_OK) fail_msg("load: %s", err);
    remove(path);
    return model;
}

static void test_model_template(void **state) {
    (void)state;
    fx_model *m = load_chat_model(T_QWEN2_5, "chat-qwen.gguf");
    const char *family = NULL;
    assert_int_equal(fx_chat_detect(m, NULL, &family), FX_OK);
    assert_string_equal(family, "chatml");
    char buf[1024];
    size_t needed = 0;
    assert_int_equal(fx_chat_apply(m, NULL, conv4, 4, FX_CHAT_ADD_ASSISTANT,
                                   buf, sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, cases[0].expected);
    /* The caller's choice wins over the model's own. */
    assert_int_equal(fx_chat_apply(m, "vicuna", conv4 + 1, 1, 0, buf,
                                   sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, "USER: Hello\n");
    /* End-of-turn ids: <|im_end|> (4), <|endoftext|> (5), EOS (2). */
    int32_t ids[8];
    size_t n = 0;
    assert_int_equal(fx_model_chat_stop_tokens(m, NULL, ids, 8, &n), FX_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 5);
    assert_int_equal(ids[2], 2);
    assert_int_equal(fx_model_chat_stop_tokens(m, NULL, ids, 2, &n),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 3);
    /* llama3's tokens are not in this vocabulary: only EOS is offered. */
    assert_int_equal(fx_model_chat_stop_tokens(m, "llama3", ids, 8, &n),
                     FX_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    /* Errors land in the model's message. */
    assert_int_equal(fx_chat_apply(m, "{% nonsense %}", conv4, 4, 0, buf,
                                   sizeof buf, &needed), FX_ERR_BAD_TEMPLATE);
    assert_true(strstr(fx_model_errmsg(m), "nonsense") != NULL);
    assert_int_equal(fx_chat_apply(m, NULL, conv4, 0, 0, buf, sizeof buf,
                                   &needed), FX_ERR_INVALID_ARG);
    assert_true(strstr(fx_model_errmsg(m), "empty") != NULL);
    fx_model_free(m);

    /* Zephyr's eos_token is the model's EOS text. */
    m = load_chat_model(T_TINYLLAMA, "chat-zephyr.gguf");
    assert_int_equal(fx_chat_apply(m, NULL, conv4 + 1, 1, FX_CHAT_WITH_BOS,
                                   buf, sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, "<|user|>\nHello</s>\n");
    assert_int_equal(fx_model_chat_stop_tokens(m, NULL, ids, 8, &n), FX_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    fx_model_free(m);

    /* A template of no known family: rendered by the interpreter with the
     * model's BOS/EOS texts, and its end-of-turn token derived from what
     * it writes after an assistant message. */
    m = load_chat_model("{{ bos_token }}{% for m in messages %}"
                        "<|endoftext|>{{ m.content }}<|im_end|>{% endfor %}"
                        "{{ eos_token }}", "chat-jinja.gguf");
    assert_int_equal(fx_chat_detect(m, NULL, &family), FX_OK);
    assert_string_equal(family, "jinja");
    assert_int_equal(fx_chat_apply(m, NULL, conv4 + 1, 2, FX_CHAT_WITH_BOS,
                                   buf, sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, "<s><|endoftext|>Hello<|im_end|><|endoftext|>"
                             "Hi there<|im_end|></s>");
    assert_int_equal(fx_chat_apply(m, NULL, conv4 + 1, 2, 0, buf, sizeof buf,
                                   &needed), FX_OK);
    assert_string_equal(buf, "<|endoftext|>Hello<|im_end|><|endoftext|>"
                             "Hi there<|im_end|></s>");
    assert_int_equal(fx_model_chat_stop_tokens(m, NULL, ids, 8, &n), FX_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 4); /* <|im_end|> */
    assert_int_equal(ids[1], 2); /* EOS */
    fx_model_free(m);

    /* No template in the file: FX_ERR_MISSING, named. */
    m = load_chat_model(NULL, "chat-none.gguf");
    assert_int_equal(fx_chat_apply(m, NULL, conv4, 4, 0, buf, sizeof buf,
                                   &needed), FX_ERR_MISSING);
    assert_true(strstr(fx_model_errmsg(m), "tokenizer.chat_template") != NULL);
    assert_int_equal(fx_model_chat_stop_tokens(m, NULL, ids, 8, &n),
                     FX_ERR_MISSING);
    assert_int_equal(fx_chat_apply(m, "llama2", conv4, 4, FX_CHAT_WITH_BOS,
                                   buf, sizeof buf, &needed), FX_OK);
    assert_string_equal(buf, "<s>[INST] <<SYS>>\n" SYS "\n<</SYS>>\n\nHello "
                             "[/INST] Hi there </s><s>[INST] Who are you? "
                             "[/INST]");
    /* The BOS contract: the text without its leading BOS, tokenized with
     * BOS added and specials parsed, starts with exactly one BOS and keeps
     * the template's inner <s> and </s> as tokens. */
    assert_int_equal(fx_chat_apply(m, "llama2", conv4, 4, 0, buf, sizeof buf,
                                   &needed), FX_OK);
    int32_t toks[512];
    size_t nt = 0, n_bos = 0, n_eos = 0;
    assert_int_equal(fx_tokenize(m, buf, needed - 1, FX_TOKENIZE_ADD_SPECIAL |
                                 FX_TOKENIZE_PARSE_SPECIAL, toks, 512, &nt),
                     FX_OK);
    assert_true(nt > 2);
    assert_int_equal(toks[0], 1);
    assert_int_not_equal(toks[1], 1);
    for (size_t i = 0; i < nt; i++) {
        n_bos += toks[i] == 1;
        n_eos += toks[i] == 2;
    }
    assert_int_equal(n_bos, 2); /* the leading one and "</s><s>[INST]" */
    assert_int_equal(n_eos, 1);
    assert_int_equal(fx_model_chat_stop_tokens(NULL, NULL, ids, 8, &n),
                     FX_ERR_INVALID_ARG);
    fx_model_free(m);
}

/* ---- allocation failure (RELIABILITY G43) ---- */

static void test_allocation_failure(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    vocab_spec v = { spec.n_vocab, T_LLAMA3 };
    spec.extra_kv = chat_vocab;
    spec.extra_user = &v;
    const char *path = fx_test_tmp_path("chat-alloc.gguf");
    assert_int_equal(gw_write_model(path, &spec), 0);

    fx_fault_alloc fa = {0};
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    params.allocator = fx_fault_allocator(&fa);
    fx_model *m = NULL;
    assert_int_equal(fx_model_load(path, &params, &m, NULL, 0), FX_OK);
    remove(path);
    long live = fa.live;
    char buf[512];
    size_t needed = 0;
    fx_fault_plan(&fa, 1, 1);
    assert_int_equal(fx_chat_apply(m, NULL, conv4, 4, 0, buf, sizeof buf,
                                   &needed), FX_ERR_NOMEM);
    assert_string_equal(buf, "");
    assert_int_equal(fa.live, live);
    /* Still usable once memory is back. */
    fx_fault_stop(&fa);
    assert_int_equal(fx_chat_apply(m, NULL, conv4, 4, 0, buf, sizeof buf,
                                   &needed), FX_OK);
    assert_int_equal(fa.live, live);
    assert_true(strncmp(buf, "<|start_header_id|>system", 25) == 0);
    fx_model_free(m);
    assert_int_equal(fa.live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_default_system_prompts),
        cmocka_unit_test(test_opener_and_whitespace),
        cmocka_unit_test(test_bos),
        cmocka_unit_test(test_family_list),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_buffer_sizes),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_large_input),
        cmocka_unit_test(test_model_template),
        cmocka_unit_test(test_allocation_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
