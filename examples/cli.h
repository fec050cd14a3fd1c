/*
 * Option parsing shared by the command-line tools, so that every tool
 * treats its arguments alike: numbers parse strictly (the whole value, in
 * range, no sign wrapping), a bad or unknown option is named, --help goes
 * to stdout with exit status 0, and errors go to stderr with exit status 2
 * (usage) or 1 (a failure). Header-only: the public tools link the shared
 * library alone.
 *
 *   cli c;
 *   cli_init(&c, "ferrox-x", argc, argv);
 *   while (cli_next(&c)) {
 *       if (cli_is_help(&c)) return usage(stdout);
 *       else if (cli_is(&c, "--model")) { if (!(model = cli_value(&c))) return CLI_USAGE; }
 *       else if (cli_is(&c, "--n")) { if (cli_u32(&c, 1, 100, &n)) return CLI_USAGE; }
 *       else return cli_unknown(&c);
 *   }
 */
#ifndef FX_CLI_H
#define FX_CLI_H

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit statuses of every tool. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

typedef struct cli {
    const char *tool; /* prefix of every message */
    int argc;
    char **argv;
    int next;         /* index of the next argument */
    const char *arg;  /* the argument cli_next returned */
} cli;

static inline void cli_init(cli *c, const char *tool, int argc, char **argv) {
    c->tool = tool;
    c->argc = argc;
    c->argv = argv;
    c->next = 1;
    c->arg = NULL;
}

/* The next argument (an option or a positional one), or NULL at the end. */
static inline const char *cli_next(cli *c) {
    c->arg = c->next < c->argc ? c->argv[c->next++] : NULL;
    return c->arg;
}

static inline int cli_is(const cli *c, const char *name) {
    return strcmp(c->arg, name) == 0;
}

static inline int cli_is_help(const cli *c) {
    return cli_is(c, "--help") || cli_is(c, "-h");
}

/* "TOOL: message" and a pointer to --help on stderr; returns CLI_USAGE. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int cli_usage_error(const cli *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", c->tool);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help' for the options.\n", c->tool);
    va_end(ap);
    return CLI_USAGE;
}

/* The current argument is not an option this tool knows. */
static inline int cli_unknown(const cli *c) {
    if (c->arg[0] == '-')
        return cli_usage_error(c, "unknown option %s", c->arg);
    return cli_usage_error(c, "unexpected argument '%s'", c->arg);
}

/* The current option's value (the next argument), or NULL after saying it
 * is missing. */
static inline const char *cli_value(cli *c) {
    if (c->next >= c->argc) {
        cli_usage_error(c, "%s needs a value", c->arg);
        return NULL;
    }
    return c->argv[c->next++];
}

/* The value as a whole number in lo..hi: digits only, so "-5" is refused
 * rather than wrapped. 0, or -1 after naming the option. */
static inline int cli_u64(cli *c, uint64_t lo, uint64_t hi, uint64_t *out) {
    const char *opt = c->arg, *v = cli_value(c);
    if (!v) return -1;
    int digits = v[0] != '\0';
    for (const char *p = v; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
    errno = 0;
    char *end = NULL;
    unsigned long long n = digits ? strtoull(v, &end, 10) : 0;
    if (!digits || errno == ERANGE || *end != '\0' || n < lo || n > hi) {
        cli_usage_error(c, "%s: '%s' is not a whole number from %llu to %llu",
                        opt, v, (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = (uint64_t)n;
    return 0;
}

static inline int cli_u32(cli *c, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t n;
    if (cli_u64(c, lo, hi, &n) != 0) return -1;
    *out = (uint32_t)n;
    return 0;
}

/* The value as a finite number in lo..hi (greater than lo when lo_open).
 * 0, or -1 after naming the option. */
static inline int cli_double(cli *c, double lo, double hi, int lo_open,
                             double *out) {
    const char *opt = c->arg, *v = cli_value(c);
    if (!v) return -1;
    errno = 0;
    char *end = NULL;
    double x = v[0] && !isspace((unsigned char)v[0]) ? strtod(v, &end) : NAN;
    if (!end || *end != '\0' || errno == ERANGE || !isfinite(x)) {
        cli_usage_error(c, "%s: '%s' is not a number", opt, v);
        return -1;
    }
    if (x < lo || x > hi || (lo_open && x == lo)) {
        cli_usage_error(c, "%s: %s is out of range (%s %g, at most %g)", opt, v,
                        lo_open ? "more than" : "at least", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static inline int cli_float(cli *c, float lo, float hi, int lo_open,
                            float *out) {
    double x;
    if (cli_double(c, lo, hi, lo_open, &x) != 0) return -1;
    *out = (float)x;
    return 0;
}

/* The value as the index of one of n names ("--kv-type f16" -> 1). 0, or
 * -1 after naming the option and the choices. */
static inline int cli_choice(cli *c, const char *const *names, int n,
                             int *out) {
    const char *opt = c->arg, *v = cli_value(c);
    if (!v) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "%s: %s: '%s' is not one of:", c->tool, opt, v);
    for (int i = 0; i < n; i++) fprintf(stderr, " %s", names[i]);
    fprintf(stderr, "\nTry '%s --help' for the options.\n", c->tool);
    return -1;
}

/* One line on stderr for a failed call: "TOOL: SUBJECT: what: message",
 * where `what` (fx_status_str) is left out when the message already
 * starts with it. Returns CLI_FAILED. */
static inline int cli_fail(const char *tool, const char *subject,
                           const char *what, const char *msg) {
    size_t n = strlen(what);
    int repeats = msg && strncmp(msg, what, n) == 0;
    fprintf(stderr, "%s: ", tool);
    if (subject) fprintf(stderr, "%s: ", subject);
    if (!msg || !msg[0]) fprintf(stderr, "%s\n", what);
    else if (repeats) fprintf(stderr, "%s\n", msg);
    else fprintf(stderr, "%s: %s\n", what, msg);
    return CLI_FAILED;
}

/* The whole file, NUL-terminated (the NUL not counted in *len), in a
 * malloc'd buffer; NULL if it cannot be opened, read or held. */
static inline char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap - 1) {
            char *grown = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len) *len = n;
    }
    return buf;
}

#endif /* FX_CLI_H */
