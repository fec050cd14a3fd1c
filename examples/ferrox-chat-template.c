/*
 * ferrox-chat-template: print the prompt a chat template renders.
 *
 *   ferrox-chat-template (--model M.gguf | --template NAME_OR_TEXT)
 *                        [--system S] --user U [--assistant A --user U ...]
 *                        [--no-assistant-opener] [--with-bos] [--stops]
 *
 * With --model the model's own tokenizer.chat_template is used unless
 * --template is also given. --template @FILE reads the template text from
 * FILE. The prompt goes to stdout exactly, with no newline added, so it
 * can be piped into a tokenizer or compared byte for byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ferrox.h"

static int usage(FILE *f) {
    fprintf(f,
        "usage: ferrox-chat-template (--model M.gguf | --template NAME_OR_TEXT)\n"
        "           [--system S] --user U [--assistant A --user U ...]\n"
        "           [--no-assistant-opener] [--with-bos] [--stops]\n"
        "  --template @FILE   read the template text from FILE\n"
        "  --with-bos         keep the template's leading BOS text\n"
        "  --stops            print the family and its stop tokens to stderr\n"
        "families:");
    for (size_t i = 0; i < fx_chat_family_count(); i++)
        fprintf(f, " %s", fx_chat_family_name(i));
    fprintf(f, "\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tmpl = NULL;
    char *tmpl_file = NULL;
    uint32_t flags = FX_CHAT_ADD_ASSISTANT;
    int show_stops = 0;
    fx_chat_message *msgs = calloc((size_t)argc, sizeof *msgs);
    size_t n = 0;
    int rc = 1;
    if (!msgs) return 1;

    cli c;
    cli_init(&c, "ferrox-chat-template", argc, argv);
    while (cli_next(&c)) {
        const char *role = NULL, *v = NULL;
        if (cli_is(&c, "--system")) role = "system";
        else if (cli_is(&c, "--user")) role = "user";
        else if (cli_is(&c, "--assistant")) role = "assistant";
        if (role || cli_is(&c, "--model") || cli_is(&c, "--template")) {
            const int is_model = cli_is(&c, "--model");
            if (!(v = cli_value(&c))) {
                rc = CLI_USAGE;
                goto done;
            }
            if (role) {
                msgs[n].role = role;
                msgs[n].content = v;
                n++;
            } else if (is_model) {
                model_path = v;
            } else if (v[0] == '@') {
                free(tmpl_file);
                tmpl_file = cli_read_file(v + 1, NULL);
                if (!tmpl_file) {
                    fprintf(stderr, "ferrox-chat-template: cannot read %s\n",
                            v + 1);
                    goto done;
                }
                tmpl = tmpl_file;
            } else {
                tmpl = v;
            }
        } else if (cli_is(&c, "--no-assistant-opener")) {
            flags &= ~(uint32_t)FX_CHAT_ADD_ASSISTANT;
        } else if (cli_is(&c, "--with-bos")) {
            flags |= FX_CHAT_WITH_BOS;
        } else if (cli_is(&c, "--stops")) {
            show_stops = 1;
        } else if (cli_is_help(&c)) {
            rc = usage(stdout);
            goto done;
        } else {
            rc = cli_unknown(&c);
            goto done;
        }
    }
    if (!model_path && !tmpl) {
        rc = cli_usage_error(&c, "give --model or --template");
        goto done;
    }
    if (n == 0) {
        rc = cli_usage_error(&c, "no message: give at least one --user");
        goto done;
    }

    fx_model *model = NULL;
    if (model_path) {
        fx_model_params params;
        char err[512];
        fx_model_params_init(&params);
        params.flags = FX_MODEL_VOCAB_ONLY;
        fx_status st = fx_model_load(model_path, &params, &model, err,
                                     sizeof err);
        if (st != FX_OK) {
            cli_fail("ferrox-chat-template", model_path, fx_status_str(st), err);
            goto done;
        }
    }

    size_t needed = 0;
    char errbuf[512] = "";
    fx_status st = model ? fx_chat_apply(model, tmpl, msgs, n, flags, NULL, 0,
                                         &needed)
                         : fx_chat_apply_template(tmpl, msgs, n, flags, NULL,
                                                  0, &needed, errbuf,
                                                  sizeof errbuf);
    char *out = NULL;
    if (st == FX_ERR_BUFFER_TOO_SMALL) {
        out = malloc(needed);
        st = !out ? FX_ERR_NOMEM
           : model ? fx_chat_apply(model, tmpl, msgs, n, flags, out, needed,
                                   &needed)
                   : fx_chat_apply_template(tmpl, msgs, n, flags, out, needed,
                                            &needed, errbuf, sizeof errbuf);
    }
    if (st != FX_OK) {
        cli_fail("ferrox-chat-template", NULL, fx_status_str(st),
                 model ? fx_model_errmsg(model) : errbuf);
    } else {
        fwrite(out, 1, needed - 1, stdout);
        rc = 0;
    }
    free(out);

    if (rc == 0 && show_stops) {
        const char *family = NULL;
        if (fx_chat_detect(model, tmpl, &family) == FX_OK)
            fprintf(stderr, "family: %s\n", family);
        if (model) {
            int32_t ids[16];
            size_t n_ids = 0;
            if (fx_model_chat_stop_tokens(model, tmpl, ids, 16, &n_ids) ==
                FX_OK) {
                fprintf(stderr, "stop tokens:");
                for (size_t i = 0; i < n_ids; i++)
                    fprintf(stderr, " %d", (int)ids[i]);
                fprintf(stderr, "\n");
            }
        } else if (tmpl) {
            const char *texts[16];
            size_t n_texts = 0;
            if (fx_chat_stop_strings(tmpl, texts, 16, &n_texts) == FX_OK) {
                fprintf(stderr, "stop strings:");
                for (size_t i = 0; i < n_texts; i++)
                    fprintf(stderr, " %s", texts[i]);
                fprintf(stderr, "\n");
            }
        }
    }
    fx_model_free(model);
done:
    free(tmpl_file);
    free(msgs);
    return rc;
}
