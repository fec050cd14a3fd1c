/*
 * npc-demo: a game-style frame loop driving ferrox.
 *
 *   npc-demo [--model M.gguf] [--npcs N] [--frames F] [--fps R]
 *            [--step-tokens T] [--threads K] [--quiet]
 *
 * The host owns the loop. Every frame it calls fx_step once -- bounded by
 * --step-tokens, so a frame's cost stays predictable -- polls the events,
 * and streams each NPC's line as it arrives. A dozen NPCs share one pinned
 * system prompt (computed once, then adopted from the prefix cache by
 * every NPC); some are cancelled when "the player walks away", some end on
 * stop strings. Each frame prints its step time.
 *
 * Without --model it runs on the small synthetic model the build made
 * (random weights: the words are nonsense, the mechanics are real).
 */
#define _POSIX_C_SOURCE 200809L
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef NPC_DEFAULT_MODEL
#define NPC_DEFAULT_MODEL "npc-model.gguf"
#endif

static const char *const SYSTEM_PROMPT =
    "You are a villager in the town of Ferrox. Answer the traveller in one "
    "short sentence, in character, and never mention that you are a program.";

static const char *const LINES[] = {
    "Blacksmith, what news from the mines?",
    "Baker, is the bread fresh today?",
    "Guard, why is the north gate closed?",
    "Fisher, how is the river this season?",
    "Innkeeper, do you have a room for the night?",
    "Priest, what do the bells mean at dawn?",
    "Child, have you seen a grey cat?",
    "Merchant, what do you sell?",
    "Farmer, will it rain tomorrow?",
    "Hunter, are there wolves in the forest?",
    "Bard, sing me the song of the old king.",
    "Elder, tell me about the founding of the town.",
};
#define N_LINES (sizeof LINES / sizeof *LINES)

typedef struct npc {
    int id;
    fx_row *row;
    int done;
    size_t chars;
    fx_finish_reason finish;
} npc;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    double d = t - now();
    if (d <= 0) return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *finish_name(fx_finish_reason f) {
    switch (f) {
    case FX_FINISH_EOS: return "end of turn";
    case FX_FINISH_STOP: return "stop string";
    case FX_FINISH_LENGTH: return "length";
    case FX_FINISH_CANCELLED: return "cancelled";
    case FX_FINISH_ERROR: return "error";
    default: return "?";
    }
}

/* The prompt an NPC's row continues the lease with: plain text. */
static char *npc_prompt(const char *line) {
    size_t n = strlen(line) + 64;
    char *p = malloc(n);
    if (p) snprintf(p, n, "\nTraveller: %s\nVillager:", line);
    return p;
}

/* With a chat template, a conversation rendered whole; malloc'd. */
static char *render_chat(const fx_model *m, const char *line) {
    fx_chat_message msgs[2] = {{"system", SYSTEM_PROMPT, 0}, {"user", line, 0}};
    size_t need = 0;
    if (fx_chat_apply(m, NULL, msgs, 2, FX_CHAT_ADD_ASSISTANT, NULL, 0, &need) !=
        FX_ERR_BUFFER_TOO_SMALL)
        return NULL;
    char *text = malloc(need);
    if (text && fx_chat_apply(m, NULL, msgs, 2, FX_CHAT_ADD_ASSISTANT, text,
                              need, &need) != FX_OK) {
        free(text);
        text = NULL;
    }
    return text;
}

/* The part every NPC's conversation shares (the system turn), so it can
 * be pinned once: the common prefix of two rendered conversations. */
static size_t shared_prefix(const fx_model *m) {
    char *a = render_chat(m, LINES[0]), *b = render_chat(m, LINES[1]);
    size_t n = 0;
    if (a && b)
        while (a[n] && a[n] == b[n]) n++;
    free(a);
    free(b);
    return n;
}

int main(int argc, char **argv) {
    const char *model_path = NPC_DEFAULT_MODEL;
    unsigned npcs = 12, frames = 600, fps = 60, step_tokens = 32, threads = 1;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--npcs")) npcs = (unsigned)atoi(v);
        else if (!strcmp(a, "--frames")) frames = (unsigned)atoi(v);
        else if (!strcmp(a, "--fps")) fps = (unsigned)atoi(v);
        else if (!strcmp(a, "--step-tokens")) step_tokens = (unsigned)atoi(v);
        else if (!strcmp(a, "--threads")) threads = (unsigned)atoi(v);
        else goto usage;
    }
    if (npcs == 0 || npcs > 64 || fps == 0 || step_tokens == 0 || threads == 0)
        goto usage;

    fx_model *model = NULL;
    char err[512];
    fx_status st = fx_model_load(model_path, NULL, &model, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "npc-demo: %s: %s: %s\n", model_path, fx_status_str(st),
                err);
        return 1;
    }
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = npcs;
    bp.max_step_tokens = step_tokens;
    bp.n_threads = threads;
    bp.n_ctx = 512;
    fx_batcher *b = NULL;
    st = fx_batcher_create(model, &bp, &b, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "npc-demo: %s: %s\n", fx_status_str(st), err);
        fx_model_free(model);
        return 1;
    }

    /* One pinned system prompt for every NPC: through the model's chat
     * template when it has one, as plain text when not. */
    const char *family = NULL;
    int chat = fx_chat_detect(model, NULL, &family) == FX_OK;
    size_t lease_len = strlen(SYSTEM_PROMPT);
    char *lease_text = NULL;
    if (chat) {
        lease_len = shared_prefix(model);
        lease_text = render_chat(model, LINES[0]);
        if (!lease_text || lease_len == 0) chat = 0;
    }
    int32_t stop_ids[8];
    size_t n_stop_ids = 0;
    if (chat && fx_model_chat_stop_tokens(model, NULL, stop_ids, 8, &n_stop_ids) != FX_OK)
        n_stop_ids = 0;
    printf("npc-demo: %s, %s\n", model_path,
           chat ? family : "no chat template (plain text prompts)");
    fx_lease *lease = NULL;
    st = fx_lease_create(b, chat ? lease_text : SYSTEM_PROMPT,
                         chat ? lease_len : strlen(SYSTEM_PROMPT),
                         chat ? FX_REQUEST_PARSE_SPECIAL : 0, &lease);
    if (st != FX_OK) {
        fprintf(stderr, "npc-demo: lease: %s: %s\n", fx_status_str(st),
                fx_batcher_errmsg(b));
        fx_batcher_free(b);
        fx_model_free(model);
        return 1;
    }

    npc *people = calloc(npcs, sizeof *people);
    double *step_ms = calloc(frames, sizeof *step_ms);
    if (!people || !step_ms) return 1;
    const char *stops[2] = {"\n", "Traveller:"};
    for (unsigned i = 0; i < npcs; i++) {
        char *prompt = chat ? render_chat(model, LINES[i % N_LINES])
                            : npc_prompt(LINES[i % N_LINES]);
        if (!prompt) return 1;
        fx_request r;
        fx_request_init(&r);
        /* With a template, the row continues the pinned system turn. */
        size_t skip = chat ? lease_len : 0;
        r.prompt = prompt + skip;
        r.prompt_len = strlen(prompt) - skip;
        if (chat) r.flags |= FX_REQUEST_PARSE_SPECIAL;
        r.stop_tokens = stop_ids;
        r.n_stop_tokens = n_stop_ids;
        r.lease = lease;
        r.max_tokens = 24 + 4 * (i % 5);
        r.temperature = 0.8f;
        r.top_p = 0.95f;
        r.seed = 1000 + i;
        /* Half the NPCs end their line at a newline or a new speaker. */
        r.stop = stops;
        r.n_stop = i % 2 ? 2 : 0;
        r.user = &people[i];
        people[i].id = (int)i;
        st = fx_submit(b, &r, &people[i].row);
        free(prompt);
        if (st != FX_OK) {
            fprintf(stderr, "npc-demo: npc %u: %s: %s\n", i, fx_status_str(st),
                    fx_batcher_errmsg(b));
            return 1;
        }
    }

    double frame_s = 1.0 / fps, start = now();
    unsigned frame = 0, finished = 0;
    uint64_t tokens = 0;
    for (; frame < frames && finished < npcs; frame++) {
        /* The player walks away from two NPCs mid-sentence. */
        if (frame == 20 && npcs > 2) fx_cancel(b, people[2].row);
        if (frame == 45 && npcs > 7) fx_cancel(b, people[7].row);

        double t0 = now();
        st = fx_step(b);
        step_ms[frame] = (now() - t0) * 1e3;
        if (st != FX_OK) {
            fprintf(stderr, "npc-demo: step: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            break;
        }
        if (!quiet)
            printf("frame %4u  step %6.2f ms  in flight %u\n", frame,
                   step_ms[frame], fx_batcher_pending(b));
        fx_event ev;
        while (fx_poll(b, &ev)) {
            npc *p = ev.user;
            if (ev.type == FX_EVENT_TEXT) {
                p->chars += ev.text_len;
                if (!quiet) printf("  [npc %2d] %.*s\n", p->id, (int)ev.text_len, ev.text);
            } else {
                p->done = 1;
                p->finish = ev.finish;
                tokens += ev.usage.completion_tokens;
                finished++;
                printf("  [npc %2d] done: %s, %u tokens (%u of %u prompt tokens "
                       "cached), first token after %.0f ms\n",
                       p->id, finish_name(ev.finish), ev.usage.completion_tokens,
                       ev.usage.cached_tokens, ev.usage.prompt_tokens,
                       ev.usage.ttft_seconds * 1e3);
            }
        }
        fflush(stdout);
        sleep_until(start + (frame + 1) * frame_s);
    }

    qsort(step_ms, frame, sizeof *step_ms, cmp_double);
    printf("\n%u NPCs, %u frames, %llu tokens; step time median %.2f ms, "
           "p99 %.2f ms, max %.2f ms (frame budget %.2f ms)\n",
           npcs, frame, (unsigned long long)tokens,
           frame ? step_ms[frame / 2] : 0.0,
           frame ? step_ms[(size_t)(frame * 0.99)] : 0.0,
           frame ? step_ms[frame - 1] : 0.0, frame_s * 1e3);
    fx_lease_release(b, lease);
    free(lease_text);
    free(people);
    free(step_ms);
    fx_batcher_free(b);
    fx_model_free(model);
    return finished == npcs ? 0 : 1;

usage:
    fprintf(stderr, "usage: npc-demo [--model M.gguf] [--npcs N] [--frames F] "
                    "[--fps R] [--step-tokens T] [--threads K] [--quiet]\n");
    return 2;
}
