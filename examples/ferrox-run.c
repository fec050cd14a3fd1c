/*
 * ferrox-run: generate text with a GGUF model through the batcher.
 *
 *   ferrox-run --model M (--prompt P | --prompts-file F) [--max-tokens N]
 *              [--temperature T] [--top-k K] [--top-p P] [--min-p P]
 *              [--seed S] [--threads K] [--parallel N] [--ignore-eos]
 *              [--stop S]... [--ids] [--fast] [--mapped | --eager-copy]
 *              [--kv-type f32|f16]
 *              [--grammar-file F | --json | --json-schema F]
 *              [--repeat-penalty R]
 *              [--typical-p P]
 *              [--chat [--system S] [--template NAME]]
 *
 * One prompt: the text streams to stdout as it is generated. With --ids it
 * prints exactly two lines, `prompt: <ids>` (the prompt tokenized with BOS
 * as the model's metadata says) and `gen: <ids>`.
 * --prompts-file: each line is a row, at most --parallel in flight; the
 * output is `row <i>: <text>` per row in input order (with --ids,
 * `row <i>: <ids>`). Each row's output equals running that prompt alone.
 * Temperature 0 (the default) is greedy.
 * --chat: each prompt is a user message, rendered with the model's chat
 * template (or --template, a family name such as "chatml"), after an
 * optional --system message; the template's end-of-turn tokens stop.
 *
 * --grammar-file: a GBNF grammar (llama.cpp's dialect, root rule "root")
 * the output must match; --json: any JSON value; --json-schema: a JSON
 * Schema file, converted with fx_json_schema_to_grammar. A grammar that
 * does not compile is reported with its line and column (a schema outside
 * the subset with where it is), and the exit status is 1.
 *
 * --mapped: compute from the file's mapping (FX_MODEL_MAPPED_WEIGHTS),
 * the same tokens: no copy of the weights, but decode reads the page
 * cache's small pages, slower than the copy (docs/performance.md has
 * both). By default the copy is made over the first 16 steps, the first
 * token computed from the mapping; --eager-copy (FX_MODEL_EAGER_COPY)
 * makes it whole before the first step.
 *
 * --kv-type f16: keys and values stored as f16 (FX_BATCHER_KV_F16,
 * llama.cpp's default cache type): half the KV memory; f32 (the default)
 * gives the results of an F32 cache.
 *
 * Each row's finish reason and token counts go to stderr after the output.
 * A grammar-bound row (--grammar-file, --json, --json-schema) that hit
 * --max-tokens is said to be truncated there, and the exit status is 1:
 * the grammar did not end it, so it may be cut short. Usage errors exit
 * with 2.
 */
#include <ferrox.h>

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_STOPS 16

typedef struct options {
    const char *model, *prompt, *prompts_file, *system, *tmpl;
    int chat;
    uint32_t max_tokens, threads, parallel;
    float temperature, top_p, min_p, repeat_penalty, typical_p;
    uint32_t top_k;
    const char *grammar_file, *schema_file;
    char *grammar;
    size_t grammar_len;
    int json;
    uint64_t seed;
    int ignore_eos, ids, fast, mapped, eager_copy, kv_type;
    const char *stops[MAX_STOPS];
    size_t n_stops;
} options;

typedef struct row_out {
    fx_row *row;
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
    int done;
    fx_finish_reason finish;
    fx_status status;  /* FX_FINISH_ERROR's cause */
    fx_usage usage;
} row_out;

static int usage(FILE *f) {
    fprintf(f,
            "usage: ferrox-run --model M (--prompt P | --prompts-file F)\n"
            "         [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
            "         [--min-p P] [--seed S] [--threads K] [--parallel N]\n"
            "         [--ignore-eos] [--stop S]... [--ids] [--fast]\n"
            "         [--mapped | --eager-copy] [--kv-type f32|f16]\n"
            "         [--chat [--system S] [--template NAME]]\n"
            "         [--grammar-file F | --json | --json-schema F]\n"
            "         [--repeat-penalty R]\n"
            "         [--typical-p P]\n"
            "Each row's finish reason and token counts go to stderr. A row\n"
            "under --grammar-file, --json or --json-schema that reaches\n"
            "--max-tokens is reported as truncated and exits with status 1.\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

/* 0, or the exit status after reporting the problem. */
static int parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 64;
    o->threads = 1;
    o->repeat_penalty = 1.0f;
    o->typical_p = 1.0f;
    o->parallel = 8;
    o->top_p = 1.0f;
    cli c;
    cli_init(&c, "ferrox-run", argc, argv);
    const char **text = NULL;
    while (cli_next(&c)) {
        int bad = 0;
        if (cli_is_help(&c)) {
            usage(stdout);
            return -1;
        }
        else if (cli_is(&c, "--ignore-eos")) o->ignore_eos = 1;
        else if (cli_is(&c, "--ids")) o->ids = 1;
        else if (cli_is(&c, "--fast")) o->fast = 1;
        else if (cli_is(&c, "--mapped")) o->mapped = 1;
        else if (cli_is(&c, "--eager-copy")) o->eager_copy = 1;
        else if (cli_is(&c, "--kv-type")) {
            static const char *const kv_types[] = {"f32", "f16"};
            bad = cli_choice(&c, kv_types, 2, &o->kv_type);
        }
        else if (cli_is(&c, "--chat")) o->chat = 1;
        else if (cli_is(&c, "--json")) o->json = 1;
        else if (cli_is(&c, "--max-tokens")) bad = cli_u32(&c, 1, UINT32_MAX, &o->max_tokens);
        else if (cli_is(&c, "--threads")) bad = cli_u32(&c, 1, 256, &o->threads);
        else if (cli_is(&c, "--parallel")) bad = cli_u32(&c, 1, 4096, &o->parallel);
        else if (cli_is(&c, "--top-k")) bad = cli_u32(&c, 0, UINT32_MAX, &o->top_k);
        else if (cli_is(&c, "--seed")) bad = cli_u64(&c, 0, UINT64_MAX, &o->seed);
        else if (cli_is(&c, "--temperature")) bad = cli_float(&c, 0, FLT_MAX, 0, &o->temperature);
        else if (cli_is(&c, "--top-p")) bad = cli_float(&c, 0, 1, 0, &o->top_p);
        else if (cli_is(&c, "--min-p")) bad = cli_float(&c, 0, 1, 0, &o->min_p);
        else if (cli_is(&c, "--typical-p")) bad = cli_float(&c, 0, 1, 0, &o->typical_p);
        else if (cli_is(&c, "--repeat-penalty")) bad = cli_float(&c, 0, FLT_MAX, 1, &o->repeat_penalty);
        else if (cli_is(&c, "--stop")) {
            if (o->n_stops == MAX_STOPS)
                return cli_usage_error(&c, "at most %d --stop strings", MAX_STOPS);
            bad = !(o->stops[o->n_stops++] = cli_value(&c));
        } else {
            if (cli_is(&c, "--model")) text = &o->model;
            else if (cli_is(&c, "--prompt")) text = &o->prompt;
            else if (cli_is(&c, "--prompts-file")) text = &o->prompts_file;
            else if (cli_is(&c, "--grammar-file")) text = &o->grammar_file;
            else if (cli_is(&c, "--json-schema")) text = &o->schema_file;
            else if (cli_is(&c, "--system")) text = &o->system;
            else if (cli_is(&c, "--template")) text = &o->tmpl;
            else return cli_unknown(&c);
            bad = !(*text = cli_value(&c));
        }
        if (bad) return CLI_USAGE;
    }
    if (!o->model) return cli_usage_error(&c, "--model is required");
    if (!o->prompt == !o->prompts_file)
        return cli_usage_error(&c, "give one of --prompt and --prompts-file");
    if ((o->system || o->tmpl) && !o->chat)
        return cli_usage_error(&c, "--system and --template need --chat");
    if (!!o->grammar_file + !!o->json + !!o->schema_file > 1)
        return cli_usage_error(&c, "--grammar-file, --json and --json-schema "
                                   "exclude each other");
    return 0;
}

/* Reads the prompts file: one prompt per line (empty lines skipped). */
static char **read_lines(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char **lines = NULL;
    size_t count = 0, cap = 0;
    char buf[65536];
    while (fgets(buf, sizeof buf, f)) {
        size_t len = strcspn(buf, "\r\n");
        buf[len] = '\0';
        if (len == 0) continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(lines, cap * sizeof *lines);
            if (!grown) break;
            lines = grown;
        }
        lines[count] = malloc(len + 1);
        if (!lines[count]) break;
        memcpy(lines[count++], buf, len + 1);
    }
    fclose(f);
    *n = count;
    return lines;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    printf("%s", label);
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
}

/* The prompt as the model sees it: with --chat, the rendered
 * conversation; malloc'd. */
static char *make_prompt(const fx_model *m, const options *o, const char *text) {
    if (!o->chat) {
        char *copy = malloc(strlen(text) + 1);
        if (copy) strcpy(copy, text);
        return copy;
    }
    fx_chat_message msgs[2] = {{"system", o->system, 0}, {"user", text, 0}};
    const fx_chat_message *first = o->system ? msgs : msgs + 1;
    size_t n = o->system ? 2 : 1, need = 0;
    fx_status st = fx_chat_apply(m, o->tmpl, first, n, FX_CHAT_ADD_ASSISTANT,
                                 NULL, 0, &need);
    char *out = st == FX_ERR_BUFFER_TOO_SMALL ? malloc(need) : NULL;
    if (out) st = fx_chat_apply(m, o->tmpl, first, n, FX_CHAT_ADD_ASSISTANT,
                                out, need, &need);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-run: chat template: %s: %s\n", fx_status_str(st),
                fx_model_errmsg(m));
        free(out);
        return NULL;
    }
    return out;
}

static const char *finish_name(fx_finish_reason f) {
    switch (f) {
    case FX_FINISH_EOS: return "eos";
    case FX_FINISH_STOP: return "stop";
    case FX_FINISH_LENGTH: return "length";
    case FX_FINISH_CANCELLED: return "cancelled";
    case FX_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* The row's finish reason and usage, one line on stderr. A grammar-bound
 * row that hit --max-tokens may have stopped inside its grammar (the
 * grammar never ended it): that is said, and makes the exit status 1. */
static int report_row(const options *o, size_t i, const row_out *r) {
    char label[32] = "";
    if (o->prompts_file) snprintf(label, sizeof label, "row %zu: ", i);
    const fx_usage *u = &r->usage;
    fprintf(stderr,
            "ferrox-run: %sfinish %s, %u prompt tokens (%u cached), %u "
            "generated, %.3f s to first token, %.3f s in all\n",
            label, finish_name(r->finish), u->prompt_tokens, u->cached_tokens,
            u->completion_tokens, u->ttft_seconds, u->total_seconds);
    if (r->finish == FX_FINISH_ERROR) {
        fprintf(stderr, "ferrox-run: %sfailed: %s\n", label,
                fx_status_str(r->status));
        return 1;
    }
    if (r->finish == FX_FINISH_LENGTH && (o->grammar || o->json)) {
        fprintf(stderr,
                "ferrox-run: %struncated: --max-tokens %u was reached before "
                "the grammar ended the output, which may be cut short\n",
                label, o->max_tokens);
        return 1;
    }
    return 0;
}

/* Reports its own failure on stderr (make_prompt's or fx_submit's). */
static fx_status submit(fx_batcher *b, const fx_model *m, const options *o,
                        const char *text, size_t index, void *user,
                        fx_row **row) {
    static int32_t stop_ids[16];
    static size_t n_stop_ids;
    char *prompt = make_prompt(m, o, text);
    if (!prompt) return FX_ERR_BAD_TEMPLATE;
    if (o->chat && fx_model_chat_stop_tokens(m, o->tmpl, stop_ids, 16,
                                             &n_stop_ids) != FX_OK)
        n_stop_ids = 0;
    fx_request req;
    fx_request_init(&req);
    req.prompt = prompt;
    req.prompt_len = strlen(prompt);
    if (o->chat) {
        req.flags |= FX_REQUEST_PARSE_SPECIAL;
        req.stop_tokens = stop_ids;
        req.n_stop_tokens = n_stop_ids;
    }
    req.max_tokens = o->max_tokens;
    req.temperature = o->temperature;
    req.top_k = o->top_k;
    req.top_p = o->top_p;
    req.min_p = o->min_p;
    req.repeat_penalty = o->repeat_penalty;
    req.typical_p = o->typical_p;
    if (o->grammar) {
        req.grammar = o->grammar;
        req.grammar_len = o->grammar_len;
    }
    if (o->json) req.flags |= FX_REQUEST_JSON;
    req.seed = o->seed;
    req.stop = o->stops;
    req.n_stop = o->n_stops;
    if (o->ignore_eos) req.flags |= FX_REQUEST_IGNORE_EOS;
    req.user = user;
    fx_status st = fx_submit(b, &req, row);
    if (st != FX_OK)
        fprintf(stderr, "ferrox-run: row %zu: %s: %s\n", index,
                fx_status_str(st), fx_batcher_errmsg(b));
    free(prompt);
    return st;
}

int main(int argc, char **argv) {
    options o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0) return prc < 0 ? CLI_OK : prc;

    if (o.grammar_file && !(o.grammar = cli_read_file(o.grammar_file, &o.grammar_len))) {
        fprintf(stderr, "ferrox-run: cannot read %s\n", o.grammar_file);
        return 1;
    }
    if (o.schema_file) {
        size_t schema_len;
        char *schema = cli_read_file(o.schema_file, &schema_len);
        if (!schema) {
            fprintf(stderr, "ferrox-run: cannot read %s\n", o.schema_file);
            return 1;
        }
        /* Asked for the size first, then written: the usual two calls. */
        char msg[512];
        size_t need = 0;
        fx_status sst = fx_json_schema_to_grammar(schema, schema_len, NULL, 0, &need,
                                                  msg, sizeof msg);
        if (sst == FX_ERR_BUFFER_TOO_SMALL && (o.grammar = malloc(need)))
            sst = fx_json_schema_to_grammar(schema, schema_len, o.grammar, need, NULL,
                                            msg, sizeof msg);
        free(schema);
        if (sst != FX_OK) {
            fprintf(stderr, "ferrox-run: %s: %s: %s\n", o.schema_file, fx_status_str(sst), msg);
            free(o.grammar);
            return 1;
        }
        o.grammar_len = need - 1;
    }
    fx_model *model = NULL;
    char err[512];
    fx_model_params mp;
    fx_model_params_init(&mp);
    if (o.mapped) mp.flags |= FX_MODEL_MAPPED_WEIGHTS;
    if (o.eager_copy) mp.flags |= FX_MODEL_EAGER_COPY;
    fx_status st = fx_model_load(o.model, &mp, &model, err, sizeof err);
    if (st != FX_OK) {
        free(o.grammar);
        return cli_fail("ferrox-run", o.model, fx_status_str(st), err);
    }
    size_t n_prompts = 1;
    char **prompts = NULL;
    if (o.prompts_file) {
        prompts = read_lines(o.prompts_file, &n_prompts);
        if (!prompts || n_prompts == 0) {
            fprintf(stderr, "ferrox-run: no prompts in %s\n", o.prompts_file);
            fx_model_free(model);
            return 1;
        }
    }
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.n_threads = o.threads;
    bp.max_rows = o.prompts_file ? o.parallel : 1;
    if (o.fast) bp.flags |= FX_BATCHER_FAST;
    if (o.kv_type) bp.flags |= FX_BATCHER_KV_F16;
    fx_batcher *b = NULL;
    st = fx_batcher_create(model, &bp, &b, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-run: %s: %s\n", fx_status_str(st), err);
        fx_model_free(model);
        return 1;
    }

    row_out *rows = calloc(n_prompts, sizeof *rows);
    int rc = rows ? 0 : 1;
    if (!rows) fprintf(stderr, "ferrox-run: out of memory\n");
    size_t submitted = 0, finished = 0;
    int stream = !o.prompts_file && !o.ids;
    while (finished < n_prompts && rc == 0) {
        /* Keep at most --parallel rows queued or running. */
        while (submitted < n_prompts && fx_batcher_pending(b) < bp.max_rows) {
            const char *p = o.prompts_file ? prompts[submitted] : o.prompt;
            st = submit(b, model, &o, p, submitted, &rows[submitted],
                        &rows[submitted].row);
            if (st != FX_OK) {
                rc = 1;
                break;
            }
            submitted++;
        }
        if (rc) break;
        if ((st = fx_step(b)) != FX_OK) {
            fprintf(stderr, "ferrox-run: step: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            rc = 1;
        }
        fx_event ev;
        fx_status pst = FX_OK;
        while (fx_poll_sized(b, &ev, sizeof ev, &pst)) {
            row_out *r = ev.user;
            if (ev.type == FX_EVENT_TEXT) {
                if (stream) {
                    fwrite(ev.text, 1, ev.text_len, stdout);
                    fflush(stdout);
                }
                char *grown = realloc(r->text, r->len + ev.text_len + 1);
                if (!grown) { rc = 1; break; }
                r->text = grown;
                memcpy(r->text + r->len, ev.text, ev.text_len);
                r->len += ev.text_len;
                r->text[r->len] = '\0';
            } else if (ev.type == FX_EVENT_DONE) {
                r->done = 1;
                r->finish = ev.finish;
                r->status = ev.status;
                r->usage = ev.usage;
                finished++;
                r->ids = malloc((ev.n_tokens + 1) * sizeof *r->ids);
                if (r->ids) {
                    memcpy(r->ids, ev.tokens, ev.n_tokens * sizeof *r->ids);
                    r->n_ids = ev.n_tokens;
                }
                if (ev.finish == FX_FINISH_ERROR) rc = 1;
            }
        }
        if (pst != FX_OK) {
            fprintf(stderr, "ferrox-run: poll: %s: %s\n", fx_status_str(pst),
                    fx_batcher_errmsg(b));
            rc = 1;
        }
    }

    if (rc == 0 && !o.prompts_file) {
        if (o.ids) {
            size_t n = 0;
            char *text = make_prompt(model, &o, o.prompt);
            uint32_t tf = FX_TOKENIZE_ADD_SPECIAL |
                          (o.chat ? FX_TOKENIZE_PARSE_SPECIAL : 0);
            if (text) fx_tokenize(model, text, strlen(text), tf, NULL, 0, &n);
            int32_t *ids = malloc((n + 1) * sizeof *ids);
            if (text && ids &&
                fx_tokenize(model, text, strlen(text), tf, ids, n, &n) == FX_OK) {
                print_ids("prompt: ", ids, n);
                print_ids("gen: ", rows[0].ids, rows[0].n_ids);
            }
            free(ids);
            free(text);
        } else {
            printf("\n");
        }
    } else if (rc == 0) {
        for (size_t i = 0; i < n_prompts; i++) {
            char label[32];
            snprintf(label, sizeof label, "row %zu: ", i);
            if (o.ids) print_ids(label, rows[i].ids, rows[i].n_ids);
            else printf("%s%s\n", label, rows[i].text ? rows[i].text : "");
        }
    }
    /* After the output, so that a streamed answer's report follows it. */
    for (size_t i = 0; rows && i < n_prompts; i++)
        if (rows[i].done && report_row(&o, i, &rows[i]) != 0) rc = 1;
    for (size_t i = 0; rows && i < n_prompts; i++) {
        free(rows[i].text);
        free(rows[i].ids);
        if (prompts) free(prompts[i]);
    }
    free(rows);
    free(o.grammar);
    free(prompts);
    fx_batcher_free(b);
    fx_model_free(model);
    return rc;
}
