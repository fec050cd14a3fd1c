/* Small helpers shared by the test programs. */
#ifndef FX_TEST_UTIL_H
#define FX_TEST_UTIL_H

#include <stddef.h>

/* Path of a file of the vendored test data (tests/data, laid out in the
 * build tree by CMake). The data is part of the repository, so a missing
 * file is a broken build: the program stops with a message instead of
 * skipping. Returns a static buffer. */
const char *fx_test_data_path(const char *relative);

/* A fresh path for a scratch file under the build's test directory. */
const char *fx_test_tmp_path(const char *name);

/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on
 * failure. */
char *fx_test_read_file(const char *path, size_t *len);

#endif
