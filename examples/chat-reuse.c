/*
 * chat-reuse: a multi-turn chat in which every turn reuses the KV of the
 * turns before it.
 *
 *   chat-reuse [--model M.gguf] [--template NAME] [--stdin] [--max-tokens N]
 *
 * Each turn renders the WHOLE conversation through the model's chat
 * template and submits it as a new request. Nothing is carried over by
 * hand: when a row ends, the batcher publishes its tokens (prompt and
 * reply) to the prefix cache, and the next turn's prompt -- the same text
 * plus the reply and a new user message -- adopts that prefix instead of
 * computing it again. After each turn the DONE event's usage says how many
 * prompt tokens came from the cache and how many were new.
 *
 * The user turns are scripted, so the program runs unattended; --stdin
 * reads them from standard input instead, one line per turn. Without
 * --model it runs on models/npc-tiny-f16.gguf, the small demo model
 * trained on generated tavern dialogue (models/README.md). A model without
 * a chat template gets "chatml" unless --template names another family.
 */
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifndef EXAMPLE_DEFAULT_MODEL
#define EXAMPLE_DEFAULT_MODEL "models/npc-tiny-f16.gguf"
#endif

#define MAX_MESSAGES 64

static const char USAGE[] =
    "usage: chat-reuse [--model M.gguf] [--template NAME] [--stdin] [--max-tokens N]\n";

static const char SYSTEM[] =
    "You are Marta, the innkeeper of Ashford. You are cheerful.";
static const char *const SCRIPT[] = {
    "Hello!",
    "Do you have a room for the night?",
    "Heard any rumours?",
    "Thanks, see you later.",
};
#define N_SCRIPT (sizeof SCRIPT / sizeof *SCRIPT)

typedef struct chat {
    fx_chat_message msgs[MAX_MESSAGES];
    size_t n;
} chat;

/* Appends a message, copying its text: fx_chat_apply reads the contents
 * at every turn, long after the buffer they came from is gone. */
static int chat_add(chat *c, const char *role, const char *text, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy || c->n == MAX_MESSAGES) {
        free(copy);
        return -1;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    c->msgs[c->n++] = (fx_chat_message){role, copy, 0};
    return 0;
}

static void chat_free(chat *c) {
    for (size_t i = 0; i < c->n; i++) free((char *)c->msgs[i].content);
    c->n = 0;
}

/* The conversation so far, opened for the assistant's next reply;
 * malloc'd. The first call asks for the size. */
static char *render(const fx_model *m, const char *tmpl, const chat *c) {
    size_t need = 0;
    fx_status st = fx_chat_apply(m, tmpl, c->msgs, c->n, FX_CHAT_ADD_ASSISTANT,
                                 NULL, 0, &need);
    char *text = st == FX_ERR_BUFFER_TOO_SMALL ? malloc(need) : NULL;
    if (text)
        st = fx_chat_apply(m, tmpl, c->msgs, c->n, FX_CHAT_ADD_ASSISTANT, text,
                           need, &need);
    if (st != FX_OK) {
        fprintf(stderr, "chat-reuse: template: %s: %s\n", fx_status_str(st),
                fx_model_errmsg(m));
        free(text);
        return NULL;
    }
    return text;
}

/* The reply as text, appended chunk by chunk. A NUL byte (a model may
 * emit one) is dropped: a chat message is a C string. */
typedef struct reply {
    char *text;
    size_t len;
} reply;

static int reply_add(reply *r, const char *text, size_t len) {
    char *grown = realloc(r->text, r->len + len + 1);
    if (!grown) return -1;
    r->text = grown;
    for (size_t i = 0; i < len; i++)
        if (text[i] != '\0') r->text[r->len++] = text[i];
    r->text[r->len] = '\0';
    return 0;
}

/* Runs one request to its end; fills *usage from the DONE event. */
static int run_turn(fx_batcher *b, const fx_request *req, reply *out,
                    fx_usage *usage) {
    fx_row *row;
    fx_status st = fx_submit(b, req, &row);
    if (st != FX_OK) {
        /* FX_ERR_NO_ROOM here: the conversation outgrew n_ctx. */
        fprintf(stderr, "chat-reuse: submit: %s: %s\n", fx_status_str(st),
                fx_batcher_errmsg(b));
        return -1;
    }
    for (;;) {
        if ((st = fx_step(b)) != FX_OK) {
            fprintf(stderr, "chat-reuse: step: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            return -1;
        }
        fx_event ev;
        while (fx_poll(b, &ev)) {
            if (ev.type == FX_EVENT_TEXT) {
                if (reply_add(out, ev.text, ev.text_len) != 0) {
                    fx_row_release(b, row); /* no DONE will come now */
                    return -1;
                }
            } else if (ev.type == FX_EVENT_DONE) {
                *usage = ev.usage;
                if (ev.finish == FX_FINISH_ERROR) {
                    fprintf(stderr, "chat-reuse: the row failed: %s\n",
                            fx_status_str(ev.status));
                    return -1;
                }
                return 0;
            }
        }
    }
}

int main(int argc, char **argv) {
    const char *path = EXAMPLE_DEFAULT_MODEL, *tmpl = NULL;
    int from_stdin = 0;
    uint32_t max_tokens = 48;
    cli args;
    cli_init(&args, "chat-reuse", argc, argv);
    while (cli_next(&args)) {
        if (cli_is_help(&args)) {
            printf("%s", USAGE);
            return CLI_OK;
        } else if (cli_is(&args, "--stdin")) {
            from_stdin = 1;
        } else if (cli_is(&args, "--model")) {
            if (!(path = cli_value(&args))) return CLI_USAGE;
        } else if (cli_is(&args, "--template")) {
            if (!(tmpl = cli_value(&args))) return CLI_USAGE;
        } else if (cli_is(&args, "--max-tokens")) {
            if (cli_u32(&args, 1, 4096, &max_tokens)) return CLI_USAGE;
        } else {
            return cli_unknown(&args);
        }
    }

    char err[512];
    fx_model *model = NULL;
    fx_status st = fx_model_load(path, NULL, &model, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "chat-reuse: %s: %s: %s\n", path, fx_status_str(st), err);
        return 1;
    }
    /* The template: --template, else the model's own, else chatml. */
    const char *family = NULL;
    st = fx_chat_detect(model, tmpl, &family);
    if (st == FX_ERR_MISSING && !tmpl) {
        tmpl = "chatml";
        st = fx_chat_detect(model, tmpl, &family);
    }
    if (st != FX_OK) {
        fprintf(stderr, "chat-reuse: template: %s: %s\n", fx_status_str(st),
                fx_model_errmsg(model));
        fx_model_free(model);
        return 1;
    }
    /* A turn ends at the family's end-of-turn token where the vocabulary
     * has one, or at its text where it does not (chatml's <|im_end|> is
     * plain text to a Llama 2 vocabulary). */
    int32_t stop_ids[8];
    size_t n_stop_ids = 0;
    const char *stops[8];
    size_t n_stops = 0;
    if (fx_model_chat_stop_tokens(model, tmpl, stop_ids, 8, &n_stop_ids) != FX_OK)
        n_stop_ids = 0;
    if (fx_chat_stop_strings(family, stops, 8, &n_stops) != FX_OK) n_stops = 0;

    /* One row at a time. The KV budget (max_rows rows of n_ctx positions)
     * also holds the cached prefix between turns: a finished row's blocks
     * stay in the prefix cache until a new row needs the room. */
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = 1;
    bp.n_ctx = 512;
    fx_batcher *b = NULL;
    st = fx_batcher_create(model, &bp, &b, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "chat-reuse: %s: %s\n", fx_status_str(st), err);
        fx_model_free(model);
        return 1;
    }
    printf("chat-reuse: %s, template %s\n", path, family);

    chat c = {.n = 0};
    int rc = chat_add(&c, "system", SYSTEM, strlen(SYSTEM));
    char line[4096];
    for (unsigned turn = 1; rc == 0; turn++) {
        const char *user;
        if (from_stdin) {
            printf("you> ");
            fflush(stdout);
            if (!fgets(line, sizeof line, stdin)) {
                printf("\n");
                break;
            }
            line[strcspn(line, "\r\n")] = '\0';
            if (!line[0]) { turn--; continue; }
            user = line;
        } else {
            if (turn > N_SCRIPT) break;
            user = SCRIPT[turn - 1];
            printf("user: %s\n", user);
        }
        char *prompt = NULL;
        if (chat_add(&c, "user", user, strlen(user)) != 0 ||
            !(prompt = render(model, tmpl, &c))) {
            rc = 1;
            break;
        }
        fx_request req;
        fx_request_init(&req);
        req.prompt = prompt;
        req.prompt_len = strlen(prompt);
        /* The template writes its markers as text ("<|im_start|>"); this
         * turns them into the model's special tokens where it has them. */
        req.flags = FX_REQUEST_PARSE_SPECIAL;
        req.max_tokens = max_tokens;
        req.temperature = 0.7f;
        req.seed = turn;
        req.stop_tokens = stop_ids;
        req.n_stop_tokens = n_stop_ids;
        req.stop = stops;
        req.n_stop = n_stops;
        reply r = {NULL, 0};
        fx_usage u;
        if (run_turn(b, &req, &r, &u) != 0 ||
            chat_add(&c, "assistant", r.text ? r.text : "", r.len) != 0) {
            rc = 1;
        } else {
            /* Reuse ends where the new prompt's tokens part from the
             * cached ones, rounded down to a whole KV block: inside the
             * previous reply as far as its text tokenizes back into the
             * ids the model sampled (it need not), else where it starts. */
            printf("turn %u: %u prompt tokens, %u cached, %u new; %u reply "
                   "tokens\nassistant: %s\n",
                   turn, u.prompt_tokens, u.cached_tokens,
                   u.prompt_tokens - u.cached_tokens, u.completion_tokens,
                   r.text ? r.text : "");
        }
        free(r.text);
        free(prompt);
    }
    chat_free(&c);
    fx_batcher_free(b);
    fx_model_free(model);
    return rc;
}
