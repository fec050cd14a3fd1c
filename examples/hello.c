/*
 * hello: the shortest complete ferrox program. Load a model, make a
 * batcher, submit one request, then step and poll until its DONE event.
 *
 *   hello [MODEL.gguf]
 *
 * Without an argument it runs on models/npc-tiny-f16.gguf, the small demo
 * model trained on generated tavern dialogue (models/README.md). The
 * question goes through the model's chat template.
 */
#include <ferrox.h>

#include <stdio.h>
#include <string.h>

#ifndef EXAMPLE_DEFAULT_MODEL
#define EXAMPLE_DEFAULT_MODEL "models/npc-tiny-f16.gguf"
#endif

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : EXAMPLE_DEFAULT_MODEL;
    fx_model *model = NULL;
    fx_batcher *b = NULL;
    char err[512];
    int rc = 1, done = 0;
    size_t bytes = 0;

    fx_status st = fx_model_load(path, NULL, &model, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "hello: %s: %s: %s\n", path, fx_status_str(st), err);
        goto out;
    }
    /* The KV cache is allocated once, here: one row of 512 positions is
     * all this program needs, whatever context the model was trained for. */
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = 1;
    bp.n_ctx = 512;
    if ((st = fx_batcher_create(model, &bp, &b, err, sizeof err)) != FX_OK) {
        fprintf(stderr, "hello: %s: %s\n", fx_status_str(st), err);
        goto out;
    }

    /* The conversation, rendered by the model's own chat template. */
    const fx_chat_message chat[2] = {
        {"system", "You are Greta, the baker of Millbrook. You are cheerful.", 0},
        {"user", "How much is a pie?", 0}};
    char prompt[1024];
    size_t needed = 0;
    if ((st = fx_chat_apply(model, NULL, chat, 2, FX_CHAT_ADD_ASSISTANT, prompt,
                            sizeof prompt, &needed)) != FX_OK) {
        fprintf(stderr, "hello: chat template: %s: %s\n", fx_status_str(st),
                fx_model_errmsg(model));
        goto out;
    }
    int32_t end_of_turn[4]; /* the template's end-of-turn tokens end the reply */
    size_t n_end = 0;
    if (fx_model_chat_stop_tokens(model, NULL, end_of_turn, 4, &n_end) != FX_OK)
        n_end = 0;

    fx_request req;
    fx_request_init(&req);
    req.prompt = prompt; /* copied by fx_submit */
    req.prompt_len = strlen(prompt);
    req.flags = FX_REQUEST_PARSE_SPECIAL; /* "<|im_start|>" is one token */
    req.stop_tokens = end_of_turn;
    req.n_stop_tokens = n_end;
    req.max_tokens = 48;
    req.temperature = 0.8f;
    req.seed = 42; /* same seed, same text */
    fx_row *row;   /* names the row to fx_cancel or fx_row_release */
    if ((st = fx_submit(b, &req, &row)) != FX_OK) {
        fprintf(stderr, "hello: %s: %s\n", fx_status_str(st), fx_batcher_errmsg(b));
        goto out;
    }

    printf("Player: %s\nGreta: ", chat[1].content);
    while (!done) {
        if ((st = fx_step(b)) != FX_OK) { /* batcher-wide failures only */
            fprintf(stderr, "hello: %s: %s\n", fx_status_str(st), fx_batcher_errmsg(b));
            goto out;
        }
        fx_event ev;
        while (fx_poll(b, &ev)) {
            if (ev.type == FX_EVENT_TEXT) { /* not NUL-terminated */
                fwrite(ev.text, 1, ev.text_len, stdout);
                bytes += ev.text_len;
            } else if (ev.type == FX_EVENT_DONE) { /* the row's last event */
                done = 1;
                rc = ev.finish == FX_FINISH_ERROR; /* the row's own failure */
                if (rc) fprintf(stderr, "hello: %s\n", fx_status_str(ev.status));
                printf("\n(%u tokens, %zu bytes of text)\n",
                       ev.usage.completion_tokens, bytes);
            }
        }
    }
out: /* both free functions accept NULL; the batcher goes first */
    fx_batcher_free(b);
    fx_model_free(model);
    return rc;
}
