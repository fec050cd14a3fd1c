/* ferrox.h on its own, as strict C99: nothing else may be needed. */
#include <ferrox.h>

int fx_header_compiles_as_c99(void);
int fx_header_compiles_as_c99(void) {
    fx_status st = FX_OK;
    fx_model_params params;
    fx_model_params_init(&params);
    return (int)st + (int)params.struct_size;
}
