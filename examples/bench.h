/*
 * What ferrox-bench's two files share: the options, the model's cost per
 * token, the roofline, and the machine measurements of bench_roofline.c.
 */
#ifndef FX_BENCH_H
#define FX_BENCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct options {
    const char *model;
    uint32_t threads, prompt_tokens, gen_tokens, repeats, prefix_tokens;
    uint32_t step_tokens;   /* max_step_tokens of the ttft batcher */
    uint32_t rows[16];
    size_t n_rows;
    int roofline, prefill, decode, ttft;
    int modes[2];
    int n_modes;
    size_t roof_mib;        /* bandwidth buffer */
    size_t gemm_n;          /* M = N = K of the peak sgemm */
    double bw_gbps, peak_gflops; /* given instead of measured */
    int kv_f16;             /* --kv-type f16 */
} options;

/* What one token costs, from the tensor table (see usage()). */
typedef struct model_cost {
    const char *wtype;
    uint64_t step_bytes;    /* weights read once per forward step */
    uint64_t layer_params;  /* matrix elements of all layers */
    uint64_t out_params;    /* the output matrix */
    uint32_t n_layer, n_head, head_dim, n_vocab;
} model_cost;

typedef struct roofline {
    double bw_gbps;         /* the decode roofline: best read pass */
    double peak_gflops;     /* the prefill roofline: OpenBLAS sgemm */
} roofline;

/* Seconds on the monotonic clock. */
double now(void);
/* Sorts v. */
double median(double *v, size_t n);
/* The 1-minute load average, so every line says how busy the machine was
 * (-1 where /proc is absent). */
double load1(void);

/* FLOPs of running tokens at positions p0 .. p0 + n - 1 of one sequence
 * with n_logits logits rows (ferrox-bench.c). */
double run_flops(const model_cost *mc, uint64_t p0, uint64_t n,
                 uint64_t n_logits);

/* The roofline phase: prints its line and fills rf (fields given on the
 * command line are kept). */
int bench_roofline(const options *o, const model_cost *mc, roofline *rf);

/* A bandwidth probe for measurements paired with a model phase: the
 * machine's read bandwidth right before and after a run, on a machine
 * whose bandwidth drifts by 2x within a minute (a shared VM). */
typedef struct bw_probe bw_probe;
bw_probe *bw_probe_create(const options *o);
/* GB/s: the best of a few read passes over the probe's buffer. */
double bw_probe_measure(bw_probe *p);
/* Seconds one read pass over `bytes` of the probe's buffer takes (one
 * stream per thread, in 4 MiB tasks; each call goes on where the last
 * stopped, so nothing comes from the caches). */
double bw_probe_read(bw_probe *p, uint64_t bytes);
void bw_probe_free(bw_probe *p);

#endif
