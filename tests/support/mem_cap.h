/*
 * Running a piece of a test in a forked child under a memory cap
 * (RLIMIT_AS: what the process maps now plus cap_mb) and an alarm, so that
 * a missed size check fails the test -- a status, a signal or a timeout
 * seen by the parent -- instead of exhausting the machine (issue 36).
 *
 * AddressSanitizer maps terabytes of shadow up front; the cap is taken
 * above that, and the object that defines fx_test_capped also asks ASan to
 * return NULL for an allocation it cannot make (as malloc does) and to
 * keep a small quarantine, so the same checks hold under it.
 */
#ifndef FX_TEST_MEM_CAP_H
#define FX_TEST_MEM_CAP_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define FX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FX_TEST_ASAN 1
#endif
#endif

/* The cap above what is mapped: ASan's own allocator needs more room. */
#ifdef FX_TEST_ASAN
#define FX_TEST_CAP_MB 768u
#else
#define FX_TEST_CAP_MB 384u
#endif

/* Runs fn in a child under a cap of cap_mb above what is mapped (0: no
 * cap) with `seconds` to finish; fails the (cmocka) test unless the child
 * exits 0. */
void fx_test_child(const char *what, void (*fn)(void), unsigned seconds, unsigned cap_mb);

/* fx_test_child with FX_TEST_CAP_MB. */
void fx_test_capped(const char *what, void (*fn)(void), unsigned seconds);

/* Checks for the child, where cmocka's belong to the parent: a message
 * and exit(1). */
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define CHECK_ST(call, want)                                                 \
    do {                                                                     \
        fx_status st_ = (call);                                              \
        CHECK(st_ == (want), "%s: %s, expected %s", #call,                   \
              fx_status_str(st_), fx_status_str(want));                      \
    } while (0)

#endif /* FX_TEST_MEM_CAP_H */
