#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *fx_test_data_path(const char *relative) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", FX_TEST_DATA_DIR, relative);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "test data %s is missing (tests/data is copied into "
                "the build tree when cmake configures)\n", path);
        exit(1);
    }
    return path;
}

const char *fx_test_tmp_path(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/tmp-%ld-%s", FX_TEST_TMPDIR,
             (long)getpid(), name);
    return path;
}

char *fx_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[size] = '\0';
        if (len) *len = (size_t)size;
    }
    return buf;
}
