/*
 * npc-demo: a game-style frame loop driving ferrox.
 *
 *   npc-demo [--model M.gguf] [--npcs N] [--frames F] [--fps R]
 *            [--step-tokens T] [--threads K] [--quiet]
 *
 * A dozen NPCs, each with a persona (a name, a trade, a town, a mood),
 * answer the player. The host owns the loop: every frame it calls fx_step
 * once -- bounded by --step-tokens, so a frame's cost stays predictable --
 * polls the events, and prints the text each NPC said during that frame
 * with the step time. When an NPC finishes, the player says something
 * more: the whole conversation is rendered again through the model's chat
 * template and the prefix cache finds the turns already computed. The
 * player walks away from one NPC mid-sentence (a cancel).
 *
 * Without --model it runs on models/npc-tiny-f16.gguf, the small model
 * trained for this demo on generated dialogue (models/README.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#ifndef NPC_DEFAULT_MODEL
#define NPC_DEFAULT_MODEL "models/npc-tiny-f16.gguf"
#endif

static const char USAGE[] =
    "usage: npc-demo [--model M.gguf] [--npcs N] [--frames F] [--fps R]\n"
    "                [--step-tokens T] [--threads K] [--quiet]\n"
    "  --model M        a chat model (default: the demo model, models/npc-tiny-f16.gguf)\n"
    "  --npcs N         NPCs talking at once, 1..64 (default 12)\n"
    "  --frames F       frames at most (default 1200)\n"
    "  --fps R          frames per second (default 60)\n"
    "  --step-tokens T  tokens one step may compute (default 32)\n"
    "  --threads K      threads for the forward pass (default 1)\n"
    "  --quiet          print finished lines only, not every frame\n";

typedef struct persona {
    const char *name, *role, *town, *mood;
    const char *lines[2]; /* what the player says, in turn */
} persona;

static const persona PEOPLE[] = {
    {"Marta", "innkeeper", "Ashford", "cheerful",
     {"Do you have a room for the night?", "How much is a bowl of stew?"}},
    {"Bram", "blacksmith", "Ironholm", "grumpy",
     {"What do you sell?", "Can you lower the price of the sword?"}},
    {"Elsie", "guard", "Stonegate", "suspicious",
     {"Any news?", "Where is the temple?"}},
    {"Tobin", "merchant", "Saltmere", "proud",
     {"What have you got?", "How much is a lantern?"}},
    {"Greta", "baker", "Millbrook", "cheerful",
     {"Good day.", "What does a honey cake cost?"}},
    {"Osric", "priest", "Elderwick", "weary",
     {"Who are you?", "Will it rain tomorrow?"}},
    {"Wren", "thief", "Ravenmoor", "nervous",
     {"Heard any rumours?", "Do you have any work for me?"}},
    {"Hilda", "farmer", "Oakfield", "weary",
     {"Do you have anything for sale?", "Goodbye."}},
    {"Cedric", "hunter", "Wolfwood", "suspicious",
     {"Is anything strange going on?", "Need any help?"}},
    {"Mira", "healer", "Fernhaven", "nervous",
     {"What is your trade?", "How do I find the inn?"}},
    {"Rolf", "fisher", "Coldbrook", "grumpy",
     {"What's the talk in town?", "Farewell."}},
    {"Petra", "bard", "Goldreach", "proud",
     {"Tell me about yourself.", "Tell me a rumour."}},
};
#define N_PEOPLE (sizeof PEOPLE / sizeof *PEOPLE)

typedef struct npc {
    const persona *who;
    fx_row *row;
    int turn;          /* index of the player's line being answered */
    int finished;      /* no more turns */
    char reply[2][512];
    size_t reply_len[2];
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

/* The conversation so far, rendered through the model's template
 * (malloc'd), or NULL. */
static char *render(const fx_model *m, const npc *p) {
    char system[256];
    snprintf(system, sizeof system, "You are %s, the %s of %s. You are %s.",
             p->who->name, p->who->role, p->who->town, p->who->mood);
    fx_chat_message msgs[5] = {{"system", system, 0}};
    size_t n = 1;
    for (int t = 0; t <= p->turn; t++) {
        msgs[n++] = (fx_chat_message){"user", p->who->lines[t], 0};
        if (t < p->turn)
            msgs[n++] = (fx_chat_message){"assistant", p->reply[t], p->reply_len[t]};
    }
    size_t need = 0;
    if (fx_chat_apply(m, NULL, msgs, n, FX_CHAT_ADD_ASSISTANT, NULL, 0, &need) !=
        FX_ERR_BUFFER_TOO_SMALL)
        return NULL;
    char *text = malloc(need);
    if (text && fx_chat_apply(m, NULL, msgs, n, FX_CHAT_ADD_ASSISTANT, text, need,
                              &need) != FX_OK) {
        free(text);
        text = NULL;
    }
    return text;
}

static fx_status submit_turn(fx_batcher *b, const fx_model *m, npc *p, unsigned id,
                             const int32_t *stop_ids, size_t n_stop_ids) {
    char *prompt = render(m, p);
    if (!prompt) return FX_ERR_INVALID_ARG;
    fx_request r;
    fx_request_init(&r);
    r.prompt = prompt;
    r.prompt_len = strlen(prompt);
    r.flags |= FX_REQUEST_PARSE_SPECIAL; /* the template's markers are tokens */
    r.stop_tokens = stop_ids;
    r.n_stop_tokens = n_stop_ids;
    r.max_tokens = 48;
    r.temperature = 0.7f;
    r.top_p = 0.9f;
    r.seed = 1000 + 10 * id + (unsigned)p->turn;
    r.user = p;
    fx_status st = fx_submit(b, &r, &p->row);
    free(prompt);
    return st;
}

int main(int argc, char **argv) {
    const char *model_path = NPC_DEFAULT_MODEL;
    uint32_t npcs = N_PEOPLE, frames = 1200, fps = 60, step_tokens = 32, threads = 1;
    int quiet = 0;
    cli c;
    cli_init(&c, "npc-demo", argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_is(&c, "--quiet")) {
            quiet = 1;
        } else if (cli_is(&c, "--model")) {
            if (!(model_path = cli_value(&c))) return CLI_USAGE;
        } else if (cli_is(&c, "--npcs")) {
            if (cli_u32(&c, 1, 64, &npcs)) return CLI_USAGE;
        } else if (cli_is(&c, "--frames")) {
            if (cli_u32(&c, 1, 1000000, &frames)) return CLI_USAGE;
        } else if (cli_is(&c, "--fps")) {
            if (cli_u32(&c, 1, 1000, &fps)) return CLI_USAGE;
        } else if (cli_is(&c, "--step-tokens")) {
            if (cli_u32(&c, 1, 65536, &step_tokens)) return CLI_USAGE;
        } else if (cli_is(&c, "--threads")) {
            if (cli_u32(&c, 1, 256, &threads)) return CLI_USAGE;
        } else {
            return cli_unknown(&c);
        }
    }

    fx_model *model = NULL;
    char err[512];
    fx_status st = fx_model_load(model_path, NULL, &model, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "npc-demo: %s: %s: %s\n", model_path, fx_status_str(st), err);
        return 1;
    }
    const char *family = NULL;
    if (fx_chat_detect(model, NULL, &family) != FX_OK) {
        fprintf(stderr, "npc-demo: %s has no chat template the demo can use: %s\n",
                model_path, fx_model_errmsg(model));
        fx_model_free(model);
        return 1;
    }
    int32_t stop_ids[8];
    size_t n_stop_ids = 0;
    if (fx_model_chat_stop_tokens(model, NULL, stop_ids, 8, &n_stop_ids) != FX_OK)
        n_stop_ids = 0;

    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = npcs;
    bp.max_step_tokens = step_tokens;
    bp.n_threads = threads;
    bp.n_ctx = 256;
    fx_batcher *b = NULL;
    st = fx_batcher_create(model, &bp, &b, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "npc-demo: %s: %s\n", fx_status_str(st), err);
        fx_model_free(model);
        return 1;
    }
    printf("npc-demo: %s (%s template), %u NPCs, %u tokens per step\n", model_path,
           family, npcs, step_tokens);

    npc *people = calloc(npcs, sizeof *people);
    double *step_ms = calloc(frames, sizeof *step_ms);
    if (!people || !step_ms) return 1;
    for (unsigned i = 0; i < npcs; i++) {
        people[i].who = &PEOPLE[i % N_PEOPLE];
        if ((st = submit_turn(b, model, &people[i], i, stop_ids, n_stop_ids)) != FX_OK) {
            fprintf(stderr, "npc-demo: %s: %s: %s\n", people[i].who->name,
                    fx_status_str(st), fx_batcher_errmsg(b));
            return 1;
        }
    }

    double frame_s = 1.0 / fps, start = now();
    unsigned frame = 0, finished = 0;
    uint64_t tokens = 0;
    char said[1024];
    for (; frame < frames && finished < npcs; frame++) {
        /* The player walks away from one NPC mid-sentence. */
        if (frame == 30 && npcs > 2) fx_cancel(b, people[2].row);

        double t0 = now();
        st = fx_step(b);
        step_ms[frame] = (now() - t0) * 1e3;
        if (st != FX_OK) {
            fprintf(stderr, "npc-demo: step: %s: %s\n", fx_status_str(st),
                    fx_batcher_errmsg(b));
            break;
        }
        size_t said_len = 0;
        said[0] = 0;
        fx_event ev;
        while (fx_poll(b, &ev)) {
            npc *p = ev.user;
            size_t *len = &p->reply_len[p->turn];
            if (ev.type == FX_EVENT_TEXT) {
                size_t room = sizeof p->reply[0] - 1 - *len;
                size_t n = ev.text_len < room ? ev.text_len : room;
                memcpy(p->reply[p->turn] + *len, ev.text, n);
                *len += n;
                p->reply[p->turn][*len] = 0;
                if (said_len + 64 < sizeof said)
                    said_len += (size_t)snprintf(said + said_len, sizeof said - said_len,
                                                 "  %s:\"%.*s\"", p->who->name,
                                                 (int)(ev.text_len > 24 ? 24 : ev.text_len),
                                                 ev.text);
                continue;
            }
            tokens += ev.usage.completion_tokens;
            printf("  %s the %s, asked \"%s\": %s\n      (%s, %u tokens, %u of %u prompt "
                   "tokens cached, first token after %.0f ms)\n",
                   p->who->name, p->who->role, p->who->lines[p->turn],
                   p->reply[p->turn], finish_name(ev.finish), ev.usage.completion_tokens,
                   ev.usage.cached_tokens, ev.usage.prompt_tokens,
                   ev.usage.ttft_seconds * 1e3);
            p->row = NULL; /* a row whose DONE was polled is gone */
            /* The player answers and the NPC speaks again, unless the
             * player walked away or this was the last line. */
            if (ev.finish == FX_FINISH_EOS && p->turn + 1 < 2) {
                p->turn++;
                unsigned id = (unsigned)(p - people);
                if (submit_turn(b, model, p, id, stop_ids, n_stop_ids) == FX_OK) continue;
            }
            p->finished = 1;
            finished++;
        }
        if (!quiet && said_len)
            printf("frame %4u  step %6.2f ms%s\n", frame, step_ms[frame], said);
        fflush(stdout);
        sleep_until(start + (frame + 1) * frame_s);
    }

    qsort(step_ms, frame, sizeof *step_ms, cmp_double);
    printf("\n%u NPCs, %u frames, %llu tokens; step time median %.2f ms, "
           "p99 %.2f ms, max %.2f ms (frame budget %.2f ms)\n",
           npcs, frame, (unsigned long long)tokens, frame ? step_ms[frame / 2] : 0.0,
           frame ? step_ms[(size_t)(frame * 0.99)] : 0.0,
           frame ? step_ms[frame - 1] : 0.0, frame_s * 1e3);
    free(people);
    free(step_ms);
    fx_batcher_free(b);
    fx_model_free(model);
    return finished == npcs ? CLI_OK : CLI_FAILED;
}
