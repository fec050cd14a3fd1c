/*
 * tool-call: NPCs answer the player in prose, or call a tool when the
 * player asks them to act; the program parses each call and lets the game
 * act on it.
 *
 *   tool-call [--model M.gguf] [--seeds N]
 *
 * N requests (default 12), one per seed, run side by side in one batcher:
 * an NPC persona told it may act, and a player's line -- a greeting, a
 * question, or a request. Each row samples freely until the model starts
 * a call (the trigger `{"action"`); from there the lazy grammar GRAMMAR
 * holds the call to one of three tools,
 *
 *   {"action": "give"|"sell"|"buy", "item": "...", "qty": N[, "price": N]}
 *   {"action": "open"|"close", "target": "..."}
 *   {"action": "heal", "target": "player"}
 *
 * so parse_call below always understands it, and fx_event.grammar_start
 * says where it begins. The demo model (models/README.md, the default)
 * answers greetings and questions in prose and requests with the action
 * asked for. The exit status is 0 only if every row ended normally and
 * every call was parsed and acted on.
 */
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifndef EXAMPLE_DEFAULT_MODEL
#define EXAMPLE_DEFAULT_MODEL "models/npc-tiny-f16.gguf"
#endif

/* The shape of an NPC's action, as the demo model learned to write it.
 * It starts with the trigger, which the grammar reads first. Every string
 * is bounded ({0,23}) and every number too, so a call is at most 87
 * characters: once started, it always ends within MAX_TOKENS. */
static const char GRAMMAR[] =
    "root  ::= \"{\" q \"action\" q \": \" (trade | door | heal) \"}\"\n"
    "trade ::= q (\"give\" | \"sell\" | \"buy\") q \", \" q \"item\" q \": \" str "
    "\", \" q \"qty\" q \": \" num (\", \" q \"price\" q \": \" num)?\n"
    "door  ::= q (\"open\" | \"close\") q \", \" q \"target\" q \": \" str\n"
    "heal  ::= q \"heal\" q \", \" q \"target\" q \": \" q \"player\" q\n"
    "str   ::= q [a-z] [a-z ]{0,23} q\n"
    "num   ::= [1-9] [0-9]{0,2}\n"
    "q     ::= [\"]\n";
static const char *const TRIGGERS[] = {"{\"action\""};
#define MAX_TOKENS 96

/* Who is asked, and what: an action, or NULL where prose is the answer. */
static const struct ask {
    const char *system, *line;
    const char *action; /* what the player asked for */
} ASKS[] = {
    {"You are Tobin, the merchant of Saltmere. You are proud.", "Sell me two ropes, please.", "sell"},
    {"You are Marta, the innkeeper of Ashford. You are cheerful.", "Good evening!", NULL},
    {"You are Marta, the innkeeper of Ashford. You are cheerful.", "Could you give me three ales?", "give"},
    {"You are Elsie, the guard of Stonegate. You are weary.", "Please open the gate.", "open"},
    {"You are Elsie, the guard of Stonegate. You are weary.", "Who are you?", NULL},
    {"You are Mira, the healer of Fernhaven. You are nervous.", "Can you heal me?", "heal"},
    {"You are Bram, the blacksmith of Ironholm. You are grumpy.", "I want to buy a dagger.", "sell"},
    {"You are Bram, the blacksmith of Ironholm. You are grumpy.", "Any news from the road?", NULL},
    {"You are Wren, the thief of Ravenmoor. You are nervous.", "Open the door for me.", "open"},
    {"You are Greta, the baker of Millbrook. You are cheerful.", "Please give me four pies.", "give"},
    {"You are Greta, the baker of Millbrook. You are cheerful.", "Farewell!", NULL},
    {"You are Rolf, the fisher of Coldbrook. You are grumpy.", "I'll buy five fish.", "sell"},
};
#define N_ASKS (sizeof ASKS / sizeof *ASKS)
#define ACT_HINT " When asked to act, answer with one JSON action."

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

/* {"action": "name", "key": "text" | integer, ...} and nothing after it:
 * the action into c->tool, the rest into c->args; 0 on success. */
static int parse_call(const char *text, call *c) {
    memset(c, 0, sizeof *c);
    const char *p = ws(text);
    if (*p++ != '{') return -1;
    for (;;) {
        char key[MAX_STR];
        if (!(p = string(ws(p), key))) return -1;
        if (*(p = ws(p)) != ':') return -1;
        p = ws(p + 1);
        if (!strcmp(key, "action")) {
            if (c->tool[0]) return -1; /* repeated */
            p = string(p, c->tool);
        } else {
            if (c->n_args == MAX_ARGS) return -1;
            arg *a = &c->args[c->n_args++];
            memcpy(a->key, key, sizeof key);
            a->is_number = *p != '"';
            p = a->is_number ? integer(p, &a->number) : string(p, a->text);
        }
        if (!p) return -1;
        if (*(p = ws(p)) == '}') break;
        if (*p++ != ',') return -1;
    }
    return c->tool[0] && *ws(p + 1) == '\0' ? 0 : -1;
}

/* ---- the tools: local functions the answer selects ---- */

/* The argument named key of the wanted kind, or NULL. */
static const arg *find_arg(const call *c, const char *key, int number) {
    for (int i = 0; i < c->n_args; i++)
        if (!strcmp(c->args[i].key, key))
            return c->args[i].is_number == number ? &c->args[i] : NULL;
    return NULL;
}

/* The game's side of each action: here it only says what happens. */
static int trade(const call *c, char *out, size_t cap) {
    const arg *item = find_arg(c, "item", 0), *qty = find_arg(c, "qty", 1);
    const arg *price = find_arg(c, "price", 1);
    if (!item || !qty || qty->number < 1) return -1;
    if (!strcmp(c->tool, "give"))
        snprintf(out, cap, "the player receives %ld x %s", qty->number, item->text);
    else if (!strcmp(c->tool, "sell") && price)
        snprintf(out, cap, "the player buys %ld x %s for %ld coins", qty->number,
                 item->text, price->number);
    else if (!strcmp(c->tool, "sell"))
        snprintf(out, cap, "the player buys %ld x %s", qty->number, item->text);
    else
        snprintf(out, cap, "the NPC buys %ld x %s from the player", qty->number,
                 item->text);
    return 0;
}

static int door(const call *c, char *out, size_t cap) {
    const arg *target = find_arg(c, "target", 0);
    if (!target) return -1;
    snprintf(out, cap, "the %s is now %s", target->text,
             !strcmp(c->tool, "open") ? "open" : "closed");
    return 0;
}

static int heal(const call *c, char *out, size_t cap) {
    const arg *target = find_arg(c, "target", 0);
    if (!target) return -1;
    snprintf(out, cap, "%s healed to full health", target->text);
    return 0;
}

static const struct tool {
    const char *name;
    int (*run)(const call *c, char *out, size_t cap);
} TOOLS[] = {{"give", trade}, {"sell", trade}, {"buy", trade},
             {"open", door},  {"close", door}, {"heal", heal}};

/* Parses an answer and runs the tool it names; 0 if both worked.
 * *as_asked says whether it is the action the player asked for. */
static int act_on(const char *answer, const char *asked, int *as_asked) {
    call c;
    char result[256];
    *as_asked = 0;
    if (parse_call(answer, &c) != 0) {
        printf("  not a tool call this program understands\n");
        return -1;
    }
    *as_asked = !strcmp(c.tool, asked);
    for (size_t i = 0; i < sizeof TOOLS / sizeof *TOOLS; i++) {
        if (strcmp(TOOLS[i].name, c.tool) != 0) continue;
        if (TOOLS[i].run(&c, result, sizeof result) != 0) {
            printf("  %s: missing or wrong arguments\n", c.tool);
            return -1;
        }
        printf("  -> %s: %s%s\n", c.tool, result, *as_asked ? "" : " (not what was asked)");
        return 0;
    }
    printf("  unknown tool \"%s\"\n", c.tool);
    return -1;
}

/* ---- the host: one row per seed ---- */

typedef struct answer {
    char text[1024];   /* MAX_TOKENS tokens of prose at most */
    size_t len;
    long call_at;      /* where the call starts in text; -1: prose */
    int done, failed;
} answer;

int main(int argc, char **argv) {
    const char *path = EXAMPLE_DEFAULT_MODEL;
    uint32_t n = N_ASKS;
    cli c;
    cli_init(&c, "tool-call", argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) {
            printf("usage: tool-call [--model M.gguf] [--seeds N (1..64)]\n");
            return CLI_OK;
        } else if (cli_is(&c, "--model")) {
            if (!(path = cli_value(&c))) return CLI_USAGE;
        } else if (cli_is(&c, "--seeds")) {
            if (cli_u32(&c, 1, 64, &n)) return CLI_USAGE;
        } else {
            return cli_unknown(&c);
        }
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
    char prompt[1024], system[256];
    for (unsigned i = 0; i < n && rc == 0; i++) {
        const struct ask *ask = &ASKS[i % N_ASKS];
        snprintf(system, sizeof system, "%s%s", ask->system, ACT_HINT);
        const fx_chat_message chat[2] = {{"system", system, 0}, {"user", ask->line, 0}};
        size_t needed;
        if ((st = fx_chat_apply(model, NULL, chat, 2, FX_CHAT_ADD_ASSISTANT, prompt,
                                sizeof prompt, &needed)) != FX_OK) {
            fprintf(stderr, "tool-call: chat template: %s: %s\n", fx_status_str(st),
                    fx_model_errmsg(model));
            rc = 1;
            break;
        }
        fx_request req;
        fx_request_init(&req);
        req.prompt = prompt; /* copied by fx_submit, like the grammar */
        req.prompt_len = strlen(prompt);
        req.flags = FX_REQUEST_PARSE_SPECIAL; /* the template's markers */
        req.grammar = GRAMMAR;
        req.grammar_len = sizeof GRAMMAR - 1;
        req.grammar_triggers = TRIGGERS; /* lazy: only once a call starts */
        req.n_grammar_triggers = 1;
        req.max_tokens = MAX_TOKENS;
        req.temperature = 0.5f;
        req.seed = i + 1;
        req.user = &answers[i];
        answers[i].call_at = -1;
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
        /* fx_poll_sized: grammar_start is newer than fx_poll's layout. */
        while (fx_poll_sized(b, &ev, sizeof ev, NULL)) {
            answer *a = ev.user;
            if (ev.type == FX_EVENT_TEXT && a->len + ev.text_len < sizeof a->text) {
                memcpy(a->text + a->len, ev.text, ev.text_len);
                a->text[a->len += ev.text_len] = '\0';
            } else if (ev.type == FX_EVENT_TEXT) {
                a->failed = 1; /* longer than MAX_TOKENS allows: a bug */
            } else if (ev.type == FX_EVENT_DONE) {
                a->done = 1;
                a->call_at = (long)ev.grammar_start;
                /* A call ends with its grammar (the end-of-sequence token
                 * is forced then), prose with the model's end of turn;
                 * anything else -- an error, the length limit -- fails. */
                if (ev.finish != FX_FINISH_EOS) {
                    a->failed = 1;
                    fprintf(stderr, "tool-call: seed %u ended: %s\n",
                            (unsigned)(a - answers) + 1,
                            ev.status == FX_ERR_GRAMMAR
                                ? "no token of the vocabulary continues the grammar"
                            : ev.finish == FX_FINISH_ERROR
                                ? fx_status_str(ev.status)
                                : "at the length limit");
                }
            }
        }
    }

    unsigned good = 0, calls = 0, as_asked = 0, prose = 0, prose_asked = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        const struct ask *ask = &ASKS[i % N_ASKS];
        answer *a = &answers[i];
        printf("seed %u: %s\n  player: %s\n", i + 1, ask->system, ask->line);
        if (!a->done || a->failed) continue;
        if (a->call_at < 0 || (size_t)a->call_at > a->len) {
            printf("  says: %s\n", a->text);
            prose++;
            prose_asked += ask->action == NULL;
            good++;
            continue;
        }
        /* Whatever came before the call is said aloud. */
        if (a->call_at > 0) printf("  says: %.*s\n", (int)a->call_at, a->text);
        printf("  calls: %s\n", a->text + a->call_at);
        int asked = 0;
        calls++;
        if (act_on(a->text + a->call_at, ask->action ? ask->action : "", &asked) == 0)
            good++;
        as_asked += (unsigned)asked;
    }
    if (rc == 0)
        printf("%u of %u answers handled: %u calls parsed and acted on (%u of "
               "them the action asked for), %u in prose (%u where no action "
               "was asked)\n",
               good, n, calls, as_asked, prose, prose_asked);
    free(answers);
    fx_batcher_free(b);
    fx_model_free(model);
    return rc == 0 && good == n ? 0 : 1;
}
