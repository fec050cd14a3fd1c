#define _DEFAULT_SOURCE
#include "mem_cap.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#ifdef FX_TEST_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1:quarantine_size_mb=16";
}
#endif

static uint64_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

void fx_test_child(const char *what, void (*fn)(void), unsigned seconds, unsigned cap_mb) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(seconds);
        if (cap_mb) {
            uint64_t cap = mapped_bytes() + ((uint64_t)cap_mb << 20);
            struct rlimit rl = {(rlim_t)cap, (rlim_t)cap};
            CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
        }
        fn();
        exit(0); /* not _exit: LeakSanitizer checks the child too */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("%s: the child died of signal %d%s", what, WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? " (time bound passed)" : "");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s: the child failed (exit %d)", what, WEXITSTATUS(status));
}

void fx_test_capped(const char *what, void (*fn)(void), unsigned seconds) {
    fx_test_child(what, fn, seconds, FX_TEST_CAP_MB);
}
