/*
 * llama.cpp's per-tensor type choice (llama_tensor_get_type), for the
 * presets ferrox-quantize offers. The comments name the llama.cpp rule
 * each branch is; the branches for presets not offered here (IQ1-IQ3,
 * Q2_K_S, TQ) and for mixtures of experts (refused by the tools) are left
 * out. Without an importance matrix, as ferrox-quantize always runs.
 */
#include "quant_rules.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const qr_preset presets[] = {
    {"Q4_0", QR_FTYPE_Q4_0, QR_Q4_0},
    {"Q4_1", QR_FTYPE_Q4_1, QR_Q4_1},
    {"Q5_0", QR_FTYPE_Q5_0, QR_Q5_0},
    {"Q5_1", QR_FTYPE_Q5_1, QR_Q5_1},
    {"Q2_K", QR_FTYPE_Q2_K, QR_Q2_K},
    {"Q3_K_S", QR_FTYPE_Q3_K_S, QR_Q3_K},
    {"Q3_K_M", QR_FTYPE_Q3_K_M, QR_Q3_K},
    {"Q3_K_L", QR_FTYPE_Q3_K_L, QR_Q3_K},
    {"IQ4_NL", QR_FTYPE_IQ4_NL, QR_IQ4_NL},
    {"IQ4_XS", QR_FTYPE_IQ4_XS, QR_IQ4_XS},
    {"Q4_K_S", QR_FTYPE_Q4_K_S, QR_Q4_K},
    {"Q4_K_M", QR_FTYPE_Q4_K_M, QR_Q4_K},
    {"Q5_K_S", QR_FTYPE_Q5_K_S, QR_Q5_K},
    {"Q5_K_M", QR_FTYPE_Q5_K_M, QR_Q5_K},
    {"Q6_K", QR_FTYPE_Q6_K, QR_Q6_K},
    {"Q8_0", QR_FTYPE_Q8_0, QR_Q8_0},
    {"F16", QR_FTYPE_F16, QR_F16},
    {"BF16", QR_FTYPE_BF16, QR_BF16},
    {"F32", QR_FTYPE_F32, QR_F32},
};

/* llama-quantize's aliases: the plain K-quant names are their _M mixes. */
static const struct { const char *alias, *name; } aliases[] = {
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

static int same_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (toupper((unsigned char)*a) != toupper((unsigned char)*b)) return 0;
    return *a == *b;
}

const qr_preset *qr_find_preset(const char *name) {
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (same_nocase(name, aliases[i].alias)) name = aliases[i].name;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (same_nocase(name, presets[i].name)) return &presets[i];
    return NULL;
}

const qr_preset *qr_presets(size_t *count) {
    *count = sizeof presets / sizeof presets[0];
    return presets;
}

uint32_t qr_block_elems(uint32_t type) {
    switch (type) {
    case QR_F32: case QR_F16: case QR_BF16: return 1;
    case QR_Q4_0: case QR_Q4_1: case QR_Q5_0: case QR_Q5_1: case QR_Q8_0:
    case QR_IQ4_NL: return 32;
    case QR_Q2_K: case QR_Q3_K: case QR_Q4_K: case QR_Q5_K: case QR_Q6_K:
    case QR_IQ4_XS: return 256;
    default: return 0;
    }
}

const char *qr_type_name(uint32_t type) {
    switch (type) {
    case QR_F32: return "f32";
    case QR_F16: return "f16";
    case QR_BF16: return "bf16";
    case QR_Q4_0: return "q4_0";
    case QR_Q4_1: return "q4_1";
    case QR_Q5_0: return "q5_0";
    case QR_Q5_1: return "q5_1";
    case QR_Q8_0: return "q8_0";
    case QR_Q2_K: return "q2_K";
    case QR_Q3_K: return "q3_K";
    case QR_Q4_K: return "q4_K";
    case QR_Q5_K: return "q5_K";
    case QR_Q6_K: return "q6_K";
    case QR_IQ4_NL: return "iq4_nl";
    case QR_IQ4_XS: return "iq4_xs";
    default: return "?";
    }
}

int qr_type_is_quantized(uint32_t type) { return qr_block_elems(type) > 1; }

/* The N of a "blk.N" prefix, or -1: llama.cpp reads it with
 * sscanf("blk.%d."), which takes the number whatever follows it. */
static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    while (isspace((unsigned char)*p)) p++;
    int neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    long v = 0;
    for (; isdigit((unsigned char)*p) && v < 100000000; p++)
        v = v * 10 + (*p - '0');
    return neg ? -v : v;
}

int qr_order_cmp(const char *a, const char *b) {
    long la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

uint32_t qr_n_dims(const uint64_t ne[4]) {
    for (int i = 3; i >= 1; i--)
        if (ne[i] != 1) return (uint32_t)i + 1;
    return 1;
}

static int has(const char *name, const char *part) {
    return strstr(name, part) != NULL;
}

int qr_should_quantize(const char *name, const uint64_t ne[4]) {
    size_t n = strlen(name);
    static const char *const keep[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight",
        "time_mix_first.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight"};
    if (n < 6 || strcmp(name + n - 6, "weight") != 0) return 0;
    if (qr_n_dims(ne) < 2) return 0;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (has(name, keep[i])) return 0;
    return strcmp(name, "position_embd.weight") != 0 &&
           strcmp(name, "token_types.weight") != 0;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers
 * and every third one between. */
static int more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* n_head / n_head_kv, 0 without KV heads (llama_hparams::n_gqa). */
static uint32_t n_gqa(const qr_model *m) {
    return m->n_head_kv ? m->n_head / m->n_head_kv : 0;
}

/* llama.cpp's LLM_TYPE_70B, whose attn_v gets more bits: Llama with 80
 * layers and grouped KV heads, Qwen2 with 80 layers. */
static int is_70b(const qr_model *m) {
    if (m->n_layer != 80) return 0;
    if (strcmp(m->arch, "llama") == 0) return m->n_head != m->n_head_kv;
    return strcmp(m->arch, "qwen2") == 0;
}

static uint32_t rule_attn_v(qr_state *st, const qr_model *m, qr_ftype f,
                            uint32_t t) {
    int i = st->i_attention_wv++, n = m->n_attention_wv;
    if (f == QR_FTYPE_Q2_K) t = n_gqa(m) >= 4 ? QR_Q4_K : QR_Q3_K;
    else if (f == QR_FTYPE_Q3_K_M) t = i < 2 ? QR_Q5_K : QR_Q4_K;
    else if (f == QR_FTYPE_Q3_K_L) t = QR_Q5_K;
    else if ((f == QR_FTYPE_IQ4_NL || f == QR_FTYPE_IQ4_XS) && n_gqa(m) >= 4)
        t = QR_Q5_K;
    else if ((f == QR_FTYPE_Q4_K_M || f == QR_FTYPE_Q5_K_M) && more_bits(i, n))
        t = QR_Q6_K;
    else if (f == QR_FTYPE_Q4_K_S && i < 4) t = QR_Q5_K;
    if (is_70b(m) && (t == QR_Q3_K || t == QR_Q4_K)) t = QR_Q5_K;
    return t;
}

/* The layer is the count of ffn_down tensors seen, out of block_count
 * (llama.cpp parses the name only for mixtures of experts). */
static uint32_t rule_ffn_down(qr_state *st, const qr_model *m, qr_ftype f,
                              uint32_t t) {
    int i = st->i_ffn_down++, n = (int)m->n_layer;
    int falcon = strcmp(m->arch, "falcon") == 0;
    if (f == QR_FTYPE_Q2_K) t = QR_Q3_K;
    else if (f == QR_FTYPE_Q3_K_M)
        t = i < n / 16 ? QR_Q5_K
            : !falcon || more_bits(i, n) ? QR_Q4_K : QR_Q3_K;
    else if (f == QR_FTYPE_Q3_K_L) t = falcon ? QR_Q4_K : QR_Q5_K;
    else if (f == QR_FTYPE_Q4_K_M) {
        if (falcon)
            t = i < n / 16 ? QR_Q6_K : more_bits(i, n) ? QR_Q5_K : QR_Q4_K;
        else if (more_bits(i, n))
            t = QR_Q6_K;
    } else if (i < n / 8 && (f == QR_FTYPE_IQ4_NL || f == QR_FTYPE_IQ4_XS))
        t = QR_Q5_K;
    else if (f == QR_FTYPE_Q5_K_M && more_bits(i, n)) t = QR_Q6_K;
    else if (f == QR_FTYPE_Q4_K_S && !falcon && i < n / 8) t = QR_Q5_K;
    return t;
}

static uint32_t rule_attn_output(const qr_model *m, qr_ftype f, uint32_t t) {
    if (strcmp(m->arch, "falcon") == 0)
        return f == QR_FTYPE_Q3_K_L ? QR_Q4_K : t;
    if (f == QR_FTYPE_Q2_K) return QR_Q3_K;
    if (f == QR_FTYPE_Q3_K_M) return QR_Q4_K;
    if (f == QR_FTYPE_Q3_K_L) return QR_Q5_K;
    return t;
}

static uint32_t rule_attn_qkv(qr_ftype f, uint32_t t) {
    if (f == QR_FTYPE_Q3_K_M || f == QR_FTYPE_Q3_K_L) return QR_Q4_K;
    if (f == QR_FTYPE_Q4_K_M) return QR_Q5_K;
    if (f == QR_FTYPE_Q5_K_M) return QR_Q6_K;
    return t;
}

/* The type for a row length the chosen one does not divide: a type of
 * similar size with blocks of 32, or F16 if even that does not fit; 0
 * (F32, never chosen here) when llama.cpp has no fallback. */
static uint32_t fallback(uint32_t t, uint64_t nx) {
    uint32_t f;
    switch (t) {
    case QR_Q2_K: case QR_Q3_K: case QR_IQ4_XS: f = QR_IQ4_NL; break;
    case QR_Q4_K: f = QR_Q5_0; break;
    case QR_Q5_K: f = QR_Q5_1; break;
    case QR_Q6_K: f = QR_Q8_0; break;
    default: return 0;
    }
    return nx % qr_block_elems(f) == 0 ? f : QR_F16;
}

int qr_tensor_type(qr_state *st, const qr_model *m, const qr_preset *p,
                   int pure, const char *name, const uint64_t ne[4],
                   uint32_t *type, char *why, size_t why_size) {
    uint32_t t = p->default_type;
    const qr_ftype f = p->ftype;
    const uint64_t nx = ne[0];
    if (pure || !qr_type_is_quantized(t)) {
        if (nx % qr_block_elems(t) != 0) {
            snprintf(why, why_size, "rows of %llu elements are not whole "
                     "blocks of %s (%u elements)", (unsigned long long)nx,
                     qr_type_name(t), qr_block_elems(t));
            return -1;
        }
        *type = t;
        return 0;
    }
    /* The output matrix, and the embedding when it is the output too. */
    if (strcmp(name, "output.weight") == 0 ||
        (!m->has_output && strcmp(name, "token_embd.weight") == 0)) {
        if (strcmp(m->arch, "falcon") == 0 || nx % qr_block_elems(t) != 0)
            t = QR_Q8_0;
        else if (t != QR_Q8_0)
            t = QR_Q6_K;
    } else if (strcmp(name, "token_embd.weight") == 0) {
        /* the presets here keep the default type */
    } else if (has(name, "attn_v.weight")) {
        t = rule_attn_v(st, m, f, t);
    } else if (has(name, "attn_k.weight") || has(name, "attn_q.weight")) {
        /* changed only for presets not offered here */
    } else if (has(name, "ffn_down")) {
        t = rule_ffn_down(st, m, f, t);
    } else if (has(name, "attn_output.weight")) {
        t = rule_attn_output(m, f, t);
    } else if (has(name, "attn_qkv.weight")) {
        t = rule_attn_qkv(f, t);
    } else if (has(name, "ffn_gate")) {
        st->i_ffn_gate++;
    } else if (has(name, "ffn_up")) {
        st->i_ffn_up++;
    }
    if (nx % qr_block_elems(t) != 0) {
        uint32_t fb = fallback(t, nx);
        if (fb == 0) {
            snprintf(why, why_size, "rows of %llu elements are not whole "
                     "blocks of %s (%u elements) and %s has no fallback type",
                     (unsigned long long)nx, qr_type_name(t),
                     qr_block_elems(t), qr_type_name(t));
            return -1;
        }
        t = fb;
        st->n_fallback++;
    }
    *type = t;
    return 0;
}

static int plan_cmp(const void *a, const void *b) {
    return qr_order_cmp(((const qr_tensor *)a)->name, ((const qr_tensor *)b)->name);
}

int qr_plan(qr_model *m, const qr_preset *p, int pure, qr_tensor *ts,
            size_t n, size_t *n_fallback, char *why, size_t why_size) {
    m->has_output = 0;
    m->n_attention_wv = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = ts[i].name;
        if (has(name, "attn_v.weight") || has(name, "attn_qkv.weight") ||
            has(name, "attn_kv_b.weight"))
            m->n_attention_wv++;
        else if (strcmp(name, "output.weight") == 0)
            m->has_output = 1;
    }
    qsort(ts, n, sizeof *ts, plan_cmp);
    qr_state st = {0};
    for (size_t i = 0; i < n; i++) {
        qr_tensor *t = &ts[i];
        t->convert = 0;
        if (!qr_should_quantize(t->name, t->ne)) continue;
        uint32_t type;
        char msg[160];
        if (qr_tensor_type(&st, m, p, pure, t->name, t->ne, &type, msg,
                           sizeof msg) != 0) {
            snprintf(why, why_size, "%s: %s", t->name, msg);
            return -1;
        }
        t->convert = type != t->type;
        t->type = type;
    }
    if (n_fallback) *n_fallback = (size_t)st.n_fallback;
    return 0;
}
