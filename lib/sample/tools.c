/*
 * Tool-call grammars. Each format is what the family's chat template
 * teaches its models to write (and what llama.cpp's tool-call grammars
 * accept):
 *   hermes   <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>,
 *            more blocks for parallel calls (Qwen 2.5 / 3, Hermes 2 Pro)
 *   llama3   {"name": N, "parameters": {...}} (Llama 3.1 - 3.3)
 *   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 * The object is one JSON Schema -- anyOf, per tool, a const name and its
 * parameters schema -- converted by json_schema; its root rule is renamed
 * and wrapped in the format's markers, which begin with the format's
 * trigger, so a lazy grammar reads the trigger first.
 */
#include "tools.h"

#include "json_schema.h"

#include <string.h>

/* A growing string. */
typedef struct sbuf {
    const fx_alloc *alloc;
    char *data;
    size_t len, cap;
} sbuf;

static fx_status sb_put(sbuf *b, const char *s, size_t n, fx_error *err) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = fx_realloc(b->alloc, b->data, cap);
        if (!p) return fx_fail(err, FX_ERR_NOMEM, "tools: out of memory");
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return FX_OK;
}

static const char *const k_triggers[] = {"<tool_call>", "{\"name\"", "[TOOL_CALLS]"};
static const char *const k_args_key[] = {"arguments", "parameters", "arguments"};

const char *fx_tool_format_trigger(fx_tool_format format) {
    return (unsigned)format < sizeof k_triggers / sizeof *k_triggers
               ? k_triggers[format] : NULL;
}

static bool name_ok(const char *name) {
    size_t n = name ? strnlen(name, FX_TOOL_NAME_MAX + 1) : 0;
    if (n == 0 || n > FX_TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* The GBNF that json_schema wrote, with every reference to (and the
 * definition of) its rule `root` renamed: names outside strings, classes
 * and comments. */
static fx_status rename_root(sbuf *out, const char *g, size_t len,
                             const char *to, fx_error *err) {
    for (size_t i = 0; i < len;) {
        char c = g[i];
        size_t j = i + 1;
        if (c == '"' || c == '[') {
            char close = c == '"' ? '"' : ']';
            while (j < len && g[j] != close) j += g[j] == '\\' ? 2 : 1;
            j = j < len ? j + 1 : len;
        } else if (c == '#') {
            while (j < len && g[j] != '\n') j++;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || c == '-' || c == '_') {
            while (j < len && ((g[j] >= 'a' && g[j] <= 'z') ||
                               (g[j] >= 'A' && g[j] <= 'Z') ||
                               (g[j] >= '0' && g[j] <= '9') || g[j] == '-' ||
                               g[j] == '_'))
                j++;
            if (j - i == 4 && memcmp(g + i, "root", 4) == 0) {
                if (sb_put(out, to, strlen(to), err) != FX_OK) return FX_ERR_NOMEM;
                i = j;
                continue;
            }
        }
        if (sb_put(out, g + i, j - i, err) != FX_OK) return FX_ERR_NOMEM;
        i = j;
    }
    return FX_OK;
}

static const char *const k_wrappers[] = {
    /* hermes: Qwen writes a newline inside the markers; allow none. */
    "root ::= tool-call-block (\"\\n\" tool-call-block){0,7}\n"
    "tool-call-block ::= \"<tool_call>\" \"\\n\"? tool-call-object \"\\n\"? "
    "\"</tool_call>\"\n",
    /* llama3: the object itself, whose first member is "name". */
    "root ::= tool-call-object\n",
    /* mistral */
    "root ::= \"[TOOL_CALLS]\" \"[\" tool-call-object (\", \"? tool-call-object){0,7} \"]\"\n",
};

fx_status fx_tools_to_gbnf(const fx_alloc *alloc, const fx_tool *tools,
                           size_t n_tools, fx_tool_format format, char **out,
                           size_t *out_len, fx_error *err) {
    *out = NULL;
    *out_len = 0;
    if (!fx_tool_format_trigger(format))
        return fx_fail(err, FX_ERR_INVALID_ARG, "tools: unknown format %d",
                       (int)format);
    if (!tools || n_tools == 0 || n_tools > FX_TOOLS_MAX)
        return fx_fail(err, FX_ERR_INVALID_ARG, "tools: 1 to %u tools",
                       FX_TOOLS_MAX);
    sbuf schema = {alloc, NULL, 0, 0}, gbnf = {alloc, NULL, 0, 0};
    fx_status st = FX_OK;
    char *object = NULL;
    size_t object_len = 0;
#define PUT(s, n) \
    do { if ((st = sb_put(&schema, (s), (n), err)) != FX_OK) goto done; } while (0)
#define PUTS(s) PUT((s), strlen(s))
    PUTS("{\"anyOf\": [");
    for (size_t i = 0; i < n_tools; i++) {
        if (!name_ok(tools[i].name)) {
            st = fx_fail(err, FX_ERR_INVALID_ARG,
                         "tools: tool %zu's name is not 1-%u of [A-Za-z0-9_.-]",
                         i, FX_TOOL_NAME_MAX);
            goto done;
        }
        /* Checked on its own first, so an error names the tool. */
        const char *params = tools[i].parameters ? tools[i].parameters
                                                 : "{\"type\": \"object\"}";
        char *one = NULL;
        size_t one_len = 0;
        fx_error sub;
        fx_error_clear(&sub);
        st = fx_json_schema_to_gbnf(alloc, params, strlen(params), &one,
                                    &one_len, &sub);
        fx_free(alloc, one);
        if (st != FX_OK) {
            fx_fail(err, st, "tools: %s's parameters: %s", tools[i].name,
                    sub.message);
            goto done;
        }
        if (i) PUTS(", ");
        PUTS("{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"");
        PUTS(tools[i].name);
        PUTS("\"}, \"");
        PUTS(k_args_key[format]);
        PUTS("\": ");
        PUTS(params);
        PUTS("}, \"required\": [\"name\", \"");
        PUTS(k_args_key[format]);
        PUTS("\"]}");
    }
    PUTS("]}");
#undef PUTS
#undef PUT
    if ((st = fx_json_schema_to_gbnf(alloc, schema.data, schema.len, &object,
                                     &object_len, err)) != FX_OK ||
        (st = rename_root(&gbnf, object, object_len, "tool-call-object", err)) !=
            FX_OK ||
        (st = sb_put(&gbnf, k_wrappers[format], strlen(k_wrappers[format]) + 1,
                     err)) != FX_OK)
        goto done;
    *out = gbnf.data;
    *out_len = gbnf.len - 1;
    gbnf.data = NULL;
done:
    fx_free(alloc, object);
    fx_free(alloc, schema.data);
    fx_free(alloc, gbnf.data);
    return st;
}
