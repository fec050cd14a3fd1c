/*
 * tool-call: a model answers with a JSON tool call that a GBNF grammar
 * holds to a fixed shape; the program parses it and calls a C function.
 *
 *   tool-call [--model M.gguf] [--seeds N]
 *
 * N requests (default 8), one per seed, run side by side in one batcher.
 * Each answer is constrained by GRAMMAR below, so whatever the weights --
 * even the random ones of the synthetic model the build makes, used when
 * there is no --model -- it is one of
 *
 *   {"tool":"get_weather","args":{"city":"...","unit":"celsius"|"fahrenheit"}}
 *   {"tool":"set_timer","args":{"minutes":N,"label":"..."}}
 *
 * and parse_call below always understands it. The exit status is 0 only
 * if every answer was parsed and acted on.
 */
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_DEFAULT_MODEL
#define EXAMPLE_DEFAULT_MODEL "npc-model.gguf"
#endif

/* Every string is bounded ({0,23}) and every number too, so the longest
 * answer is 85 characters. Each token adds at least one character (the
 * grammar never allows an empty one) and the end-of-sequence token is
 * forced once the closing brace leaves nothing else, so MAX_TOKENS
 * always reaches the end: an answer is never cut off mid-object. ["] is
 * a double quote, spelled as a class to keep the C string readable. */
static const char GRAMMAR[] =
    "root    ::= \"{\" q \"tool\" q \":\" call \"}\"\n"
    "call    ::= weather | timer\n"
    "weather ::= q \"get_weather\" q \",\" q \"args\" q \":{\" city \",\" unit \"}\"\n"
    "city    ::= q \"city\" q \":\" q name q\n"
    "unit    ::= q \"unit\" q \":\" q (\"celsius\" | \"fahrenheit\") q\n"
    "timer   ::= q \"set_timer\" q \",\" q \"args\" q \":{\" minutes \",\" label \"}\"\n"
    "minutes ::= q \"minutes\" q \":\" [1-9] [0-9]?\n"
    "label   ::= q \"label\" q \":\" q name q\n"
    "name    ::= [A-Za-z] [A-Za-z ]{0,23}\n"
    "q       ::= [\"]\n";
#define MAX_TOKENS 96

static const char *const REQUESTS[] = {
    "What is the weather like in Lisbon, in celsius?",
    "Set a timer for 12 minutes called bread.",
    "Is it cold in Oslo right now? Use fahrenheit.",
    "Remind me in 5 minutes to call Ana.",
};
#define N_REQUESTS (sizeof REQUESTS / sizeof *REQUESTS)

/* ---- a parser for the call's shape: any key order, any whitespace ---- */

#define MAX_ARGS 8
#define MAX_STR 64

typedef struct arg {
    char key[MAX_STR];
    int is_number;
    long number;
    char text[MAX_STR];
} arg;

typedef struct call {
    char tool[MAX_STR];
    arg args[MAX_ARGS];
    int n_args;
} call;

static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* A JSON string into out[MAX_STR]; NULL if malformed or too long. \u
 * escapes are refused: no argument of these tools needs one. */
static const char *string(const char *p, char *out) {
    size_t n = 0;
    if (*p++ != '"') return NULL;
    while (*p != '"') {
        char c = *p++;
        if ((unsigned char)c < 0x20) return NULL; /* NUL: unterminated */
        if (c == '\\') {
            c = *p++;
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c != '"' && c != '\\' && c != '/') return NULL;
        }
        if (n + 1 >= MAX_STR) return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return p + 1;
}

/* A JSON integer of at most 9 digits (no fraction or exponent). */
static const char *integer(const char *p, long *out) {
    int neg = *p == '-', digits = 0;
    long v = 0;
    if (neg) p++;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9') return NULL; /* 07 */
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits == 9) return NULL;
        v = v * 10 + (*p - '0');
    }
    if (digits == 0) return NULL;
    *out = neg ? -v : v;
    return p;
}

/* {"key": "text" | integer, ...} into c->args. */
static const char *args_object(const char *p, call *c) {
    if (*p++ != '{') return NULL;
    if (*(p = ws(p)) == '}') return p + 1;
    for (;;) {
        if (c->n_args == MAX_ARGS) return NULL;
        arg *a = &c->args[c->n_args++];
        if (!(p = string(ws(p), a->key))) return NULL;
        if (*(p = ws(p)) != ':') return NULL;
        p = ws(p + 1);
        a->is_number = *p != '"';
        p = a->is_number ? integer(p, &a->number) : string(p, a->text);
        if (!p) return NULL;
        if (*(p = ws(p)) == '}') return p + 1;
        if (*p++ != ',') return NULL;
    }
}

/* {"tool": "name", "args": {...}} and nothing after it; 0 on success. */
static int parse_call(const char *text, call *c) {
    int have_tool = 0, have_args = 0;
    memset(c, 0, sizeof *c);
    const char *p = ws(text);
    if (*p++ != '{') return -1;
    for (;;) {
        char key[MAX_STR];
        if (!(p = string(ws(p), key))) return -1;
        if (*(p = ws(p)) != ':') return -1;
        p = ws(p + 1);
        if (!strcmp(key, "tool") && !have_tool++) p = string(p, c->tool);
        else if (!strcmp(key, "args") && !have_args++) p = args_object(p, c);
        else return -1; /* an unknown or repeated key */
        if (!p) return -1;
        if (*(p = ws(p)) == '}') break;
        if (*p++ != ',') return -1;
    }
    return have_tool && have_args && *ws(p + 1) == '\0' ? 0 : -1;
}

/* ---- the tools: local functions the answer selects ---- */

/* The argument named key of the wanted kind, or NULL. */
static const arg *find_arg(const call *c, const char *key, int number) {
    for (int i = 0; i < c->n_args; i++)
        if (!strcmp(c->args[i].key, key))
            return c->args[i].is_number == number ? &c->args[i] : NULL;
    return NULL;
}

static int get_weather(const call *c, char *out, size_t cap) {
    const arg *city = find_arg(c, "city", 0), *unit = find_arg(c, "unit", 0);
    if (!city || !unit) return -1;
    int fahrenheit = !strcmp(unit->text, "fahrenheit");
    if (!fahrenheit && strcmp(unit->text, "celsius")) return -1;
    /* A stand-in for a weather service: a temperature from the name. */
    unsigned h = 0;
    for (const char *s = city->text; *s; s++) h = h * 31u + (unsigned char)*s;
    int celsius = (int)(h % 36u) - 5;
    snprintf(out, cap, "%d degrees %s in %s",
             fahrenheit ? celsius * 9 / 5 + 32 : celsius, unit->text, city->text);
    return 0;
}

static int set_timer(const call *c, char *out, size_t cap) {
    const arg *minutes = find_arg(c, "minutes", 1), *label = find_arg(c, "label", 0);
    if (!minutes || !label || minutes->number < 1 || minutes->number > 99) return -1;
    snprintf(out, cap, "timer \"%s\" set for %ld minute%s", label->text,
             minutes->number, minutes->number == 1 ? "" : "s");
    return 0;
}

static const struct tool {
    const char *name;
    int (*run)(const call *c, char *out, size_t cap);
} TOOLS[] = {{"get_weather", get_weather}, {"set_timer", set_timer}};

/* Parses an answer and runs the tool it names; 0 if both worked. */
static int act_on(const char *answer) {
    call c;
    char result[256];
    if (parse_call(answer, &c) != 0) {
        printf("  not a tool call this program understands\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof TOOLS / sizeof *TOOLS; i++) {
        if (strcmp(TOOLS[i].name, c.tool) != 0) continue;
        if (TOOLS[i].run(&c, result, sizeof result) != 0) {
            printf("  %s: missing or wrong arguments\n", c.tool);
            return -1;
        }
        printf("  -> %s: %s\n", c.tool, result);
        return 0;
    }
    printf("  unknown tool \"%s\"\n", c.tool);
    return -1;
}

/* ---- the host: one row per seed ---- */

typedef struct answer {
    char text[128]; /* the grammar's longest answer is 85 bytes */
    size_t len;
    int done, failed;
} answer;

int main(int argc, char **argv) {
    const char *path = EXAMPLE_DEFAULT_MODEL;
    unsigned n = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) path = argv[i + 1];
        else if (!strcmp(argv[i], "--seeds")) n = (unsigned)atoi(argv[i + 1]);
        else n = 0;
    }
    if (argc % 2 == 0 || n == 0 || n > 64) {
        fprintf(stderr, "usage: tool-call [--model M.gguf] [--seeds N (1..64)]\n");
        return 2;
    }
    char err[512];
    fx_model *model = NULL;
    fx_status st = fx_model_load(path, NULL, &model, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "tool-call: %s: %s: %s\n", path, fx_status_str(st), err);
        return 1;
    }
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = n;
    bp.n_ctx = 512;
    fx_batcher *b = NULL;
    st = fx_batcher_create(model, &bp, &b, err, sizeof err);
    answer *answers = calloc(n, sizeof *answers);
    if (st != FX_OK || !answers) {
        fprintf(stderr, "tool-call: %s: %s\n", fx_status_str(st), err);
        free(answers);
        fx_batcher_free(b);
        fx_model_free(model);
        return 1;
    }

    int rc = 0;
    char prompt[512];
    for (unsigned i = 0; i < n && rc == 0; i++) {
        snprintf(prompt, sizeof prompt,
                 "Tools: get_weather(city, unit) and set_timer(minutes, "
                 "label). Answer with one JSON object.\nRequest: %s\nJSON: ",
                 REQUESTS[i % N_REQUESTS]);
        fx_request req;
        fx_request_init(&req);
        req.prompt = prompt; /* copied by fx_submit, like the grammar */
        req.prompt_len = strlen(prompt);
        req.grammar = GRAMMAR;
        req.grammar_len = sizeof GRAMMAR - 1;
        req.max_tokens = MAX_TOKENS;
        req.temperature = 0.8f;
        req.seed = i + 1;
        req.user = &answers[i];
        fx_row *row;
        if ((st = fx_submit(b, &req, &row)) != FX_OK) {
            /* A grammar that does not compile is reported here, with its
             * line and column in the message. */
            fprintf(stderr, "tool-call: submit: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            rc = 1;
        }
    }
    while (rc == 0 && fx_batcher_pending(b) > 0) {
        if ((st = fx_step(b)) != FX_OK) {
            fprintf(stderr, "tool-call: step: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            rc = 1;
        }
        fx_event ev;
        while (fx_poll(b, &ev)) {
            answer *a = ev.user;
            if (ev.type == FX_EVENT_TEXT && a->len + ev.text_len < sizeof a->text) {
                memcpy(a->text + a->len, ev.text, ev.text_len);
                a->text[a->len += ev.text_len] = '\0';
            } else if (ev.type == FX_EVENT_TEXT) {
                a->failed = 1; /* longer than the grammar allows: a bug */
            } else if (ev.type == FX_EVENT_DONE) {
                a->done = 1;
                /* The grammar ends the row with the end-of-sequence token;
                 * anything else (an error, the length limit) is a failure. */
                if (ev.finish != FX_FINISH_EOS) {
                    a->failed = 1;
                    fprintf(stderr, "tool-call: seed %u ended: %s\n",
                            (unsigned)(a - answers) + 1,
                            ev.status == FX_ERR_GRAMMAR
                                ? "no token of the vocabulary continues the grammar"
                            : ev.finish == FX_FINISH_ERROR
                                ? fx_status_str(ev.status)
                                : "before the grammar was complete");
                }
            }
        }
    }

    unsigned good = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        printf("seed %u: %s\n  answer: %s\n", i + 1, REQUESTS[i % N_REQUESTS],
               answers[i].text);
        if (answers[i].done && !answers[i].failed && act_on(answers[i].text) == 0)
            good++;
    }
    if (rc == 0) printf("%u of %u answers parsed and acted on\n", good, n);
    free(answers);
    fx_batcher_free(b);
    fx_model_free(model);
    return rc == 0 && good == n ? 0 : 1;
}
