/* A program built against the installed ferrox, the way a user builds. */
#include <ferrox.h>
#include <stdio.h>

int main(void) {
    if (fx_version_number() != FX_VERSION_NUMBER) {
        fprintf(stderr, "header %d, library %u\n", FX_VERSION_NUMBER,
                fx_version_number());
        return 1;
    }
    fx_model *model = NULL;
    char err[256];
    fx_status st = fx_model_load("/nonexistent.gguf", NULL, &model, err,
                                 sizeof err);
    if (st != FX_ERR_IO || model != NULL) return 1;
    printf("consumer ok: ferrox %s, %s\n", fx_version_string(),
           fx_status_str(st));
    return 0;
}
