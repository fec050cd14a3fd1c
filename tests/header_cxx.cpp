// ferrox.h on its own, as C++: extern "C", no C-only constructs.
#include <ferrox.h>

int fx_header_compiles_as_cxx();
int fx_header_compiles_as_cxx() {
    fx_model_params params;
    fx_model_params_init(&params);
    fx_model *model = 0;
    return model == 0 && params.struct_size == sizeof params ? 0 : 1;
}
