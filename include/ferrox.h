/**
 * @file ferrox.h
 * @brief ferrox -- run Llama-family language models (GGUF) on the CPU for
 * many concurrent requests, from the host's own event loop.
 *
 * This is the only installed header. It includes nothing but `<stddef.h>`
 * and `<stdint.h>`, declares only opaque handles, and grows by appending:
 * status codes are never renumbered, parameter structs only gain fields at
 * the end (their first field, struct_size, tells the library which version
 * the caller was compiled against: the inline fx_*_init functions store the
 * host's own sizeof there, through the exported fx_*_init_sized), and a
 * function whose signature was wrong is replaced by a new `_v2` function,
 * never changed.
 *
 * Versioned structs, the `_init_sized` contract. Every struct that begins
 * with `uint32_t struct_size` has an exported fx_X_init_sized(p, size) and
 * an inline fx_X_init(p) that calls it with `sizeof *p` as this header
 * gives it in the host's build; a binding that declares the struct itself
 * passes its own struct's size. Only members that lie wholly inside
 * `size` are written: their defaults, zero for every other byte up to
 * `size`, and struct_size = `size`. So a host compiled against an older,
 * smaller struct is never written past its end, and a newer, larger one
 * gets zero -- "default" -- in the members this library does not know.
 * Nothing is refused there: a size smaller than the first layout is
 * recorded in struct_size, and the call that takes the struct then fails
 * with FX_ERR_INVALID_ARG. A size below sizeof(uint32_t) leaves no room for
 * struct_size: those bytes are only zeroed. Any thread may call them at
 * any time.
 *
 * Threads: the library never starts a thread unless a call's parameters ask
 * for more than one. Unless a function says otherwise, calls on one handle
 * must not overlap; calls on different handles are independent. Nothing is
 * global: every piece of state hangs off a handle. (One opt-in exception:
 * a batcher created with FX_BATCHER_FAST loads OpenBLAS, whose pthreads
 * build runs OPENBLAS_NUM_THREADS worker threads of its own until the last
 * such batcher is freed. The library does not link OpenBLAS otherwise.)
 *
 * Ownership, everywhere in this header:
 * - Pointers the caller passes in (paths, prompts, stop strings, grammars,
 *   messages, tokens) are only read during the call; whatever the library
 *   needs later it copies. The caller's memory may be freed or reused as
 *   soon as the call returns.
 * - Pointers the library returns (names, messages, event text) are owned by
 *   the library and never freed by the caller. Each function says how long
 *   its pointer stays valid: "static" means for the life of the process,
 *   otherwise until a named call on the handle, or until the handle is
 *   freed.
 * - A handle made by a create or load function is freed by its free
 *   function (which accepts NULL), exactly once. Row handles are the one
 *   exception: they are not freed, they end (see fx_row).
 *
 * Errors: every fallible call returns an fx_status. fx_status_str names it;
 * fx_model_errmsg, fx_batcher_errmsg or the call's errbuf says what exactly
 * went wrong. A handle stays usable after any failed call on it (the one
 * exception is FX_ERR_INTERNAL from fx_step).
 *
 * MIT License. See LICENSE.
 */
#ifndef FERROX_H
#define FERROX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Export and version                                                       */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup version_api Export and version
 * The version this header describes, and the version actually linked.
 * @{
 */

/**
 * @def FX_API
 * Marks a function exported from the shared library: `dllexport` or
 * `dllimport` on Windows, default visibility with GCC and Clang. A host
 * linking the static library defines FERROX_STATIC (the CMake target
 * ferrox::ferrox_static does it), which makes FX_API empty.
 */
#if defined(FERROX_STATIC)
#  define FX_API
#elif defined(_WIN32)
#  if defined(FERROX_BUILDING)
#    define FX_API __declspec(dllexport)
#  else
#    define FX_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define FX_API __attribute__((visibility("default")))
#else
#  define FX_API
#endif

/** The major version: bumped only when the ABI breaks (the SONAME is
 *  libferrox.so.FX_VERSION_MAJOR). */
#define FX_VERSION_MAJOR 0
/** The minor version: bumped when the API grows. */
#define FX_VERSION_MINOR 1
/** The patch version: bumped for fixes only. */
#define FX_VERSION_PATCH 0
/** MAJOR * 1000000 + MINOR * 1000 + PATCH, like SQLITE_VERSION_NUMBER. */
#define FX_VERSION_NUMBER \
    (FX_VERSION_MAJOR * 1000000 + FX_VERSION_MINOR * 1000 + FX_VERSION_PATCH)
/** The version as text, "MAJOR.MINOR.PATCH". */
#define FX_VERSION_STRING "0.1.0"

/**
 * The version of the library actually linked, to compare against
 * FX_VERSION_NUMBER: a host built against one header and run against an
 * older library can refuse to start instead of misbehaving.
 *
 * Threads: any thread, any time.
 *
 * @return The linked library's FX_VERSION_NUMBER.
 */
FX_API uint32_t fx_version_number(void);
/**
 * The version of the library actually linked, as text.
 *
 * Threads: any thread, any time.
 *
 * @return The linked library's FX_VERSION_STRING; static, never NULL.
 */
FX_API const char *fx_version_string(void);

/** @} */

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup status_api Status codes
 * What every fallible call returns.
 * @{
 */

/**
 * Every fallible call returns one of these. The values are fixed forever;
 * new codes are only appended. Per-row outcomes of generation arrive as
 * events, not as return values (fx_event::status).
 */
typedef enum fx_status {
    FX_OK = 0,                   /**< success */
    FX_ERR_INVALID_ARG = 1,      /**< NULL where a value is needed, a bad size,
                                    an index out of range, a bad struct_size */
    FX_ERR_NOMEM = 2,            /**< the allocator returned NULL */
    FX_ERR_IO = 3,               /**< open, stat, mmap or read failed */
    FX_ERR_UNSUPPORTED = 4,      /**< valid but not supported: an unknown
                                    architecture, a weight type other than
                                    F32/F16/BF16/Q8_0, an unknown tokenizer
                                    model or pre-tokenizer, a newer
                                    struct_size with fields set that this
                                    library ignores */
    FX_ERR_TRUNCATED = 5,        /**< the file ends inside a structure */
    FX_ERR_BAD_MAGIC = 6,        /**< not a GGUF file */
    FX_ERR_BAD_VERSION = 7,      /**< GGUF version other than 2 or 3 */
    FX_ERR_TOO_LARGE = 8,        /**< a count or size overflows or cannot fit
                                    in the file */
    FX_ERR_BAD_TYPE = 9,         /**< unknown value type, nested array, or a
                                    key stored with the wrong type */
    FX_ERR_BAD_TENSOR = 10,      /**< bad dimensions or tensor type */
    FX_ERR_BAD_OFFSET = 11,      /**< tensor data misaligned, overlapping or
                                    outside the file */
    FX_ERR_BAD_ALIGNMENT = 12,   /**< general.alignment unusable */
    FX_ERR_DUPLICATE = 13,       /**< a key or tensor name appears twice */
    FX_ERR_MISSING = 14,         /**< a required key or tensor is absent */
    FX_ERR_BAD_SHAPE = 15,       /**< a tensor's shape or type does not fit
                                    the architecture */
    FX_ERR_BAD_HPARAMS = 16,     /**< hyperparameters out of range or
                                    inconsistent with each other */
    FX_ERR_BUFFER_TOO_SMALL = 17, /**< the caller's buffer is too small; the
                                    size needed is reported */
    FX_ERR_BAD_VOCAB = 18,       /**< tokenizer metadata invalid: wrong array
                                    type or length, special id out of range,
                                    malformed byte token, empty vocabulary */
    FX_ERR_BAD_TEMPLATE = 19,    /**< a chat template that cannot be
                                    recognized or rendered, or messages it
                                    cannot take */
    FX_ERR_STALE_HANDLE = 20,    /**< a row or lease handle that was released,
                                    finished and reaped, or never issued */
    FX_ERR_REENTRANT = 21,       /**< a call into a batcher from inside one of
                                    its own callbacks (log, allocator) */
    FX_ERR_NO_ROOM = 22,         /**< a request that can never fit: longer
                                    than the context, or more KV blocks than
                                    the whole budget */
    FX_ERR_INTERNAL = 23,        /**< an internal consistency check failed;
                                    the batcher stops rather than corrupt
                                    rows (please report it) */
    FX_ERR_GRAMMAR = 24,         /**< a grammar that does not compile (the
                                    message has its line and column), or a
                                    row whose grammar cannot continue with
                                    any token of the vocabulary */
    FX_ERR_ALL_BANNED = 25       /**< a row's logit_bias is -INFINITY on
                                    every token that may come next (every
                                    token, or every one its grammar or
                                    FX_REQUEST_JSON allows): the row ends
                                    with FX_FINISH_ERROR and this status
                                    instead of sampling a banned token */
} fx_status;

/**
 * A short constant English description of a status ("truncated file").
 *
 * Threads: any thread, any time.
 *
 * @param status Any value, known or not.
 * @return A static string, never NULL; unknown values give
 *         "unknown status".
 */
FX_API const char *fx_status_str(fx_status status);

/** @} */

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup handles_api Handles
 * Opaque types the library hands out. Never dereference one, never free
 * one with free(); each has its own free or release function.
 * @{
 */

/** Loaded weights and vocabulary: made by fx_model_load, freed by
 *  fx_model_free. Read-only once loaded, so several batchers may share
 *  one. */
typedef struct fx_model fx_model;     /* loaded weights and vocabulary */
/** Rows in flight over one model: made by fx_batcher_create, freed by
 *  fx_batcher_free. Driven from one thread at a time (fx_cancel
 *  excepted). */
typedef struct fx_batcher fx_batcher; /* rows in flight over one model */
/** One request inside a batcher, returned by fx_submit. Not a pointer: a
 *  generation-counted id that is never dereferenced, so a stale one -- or
 *  one of another batcher, whose ids are salted differently -- is
 *  detected (FX_ERR_STALE_HANDLE) instead of reaching another row. It is
 *  never freed: it ends when the row's DONE event is polled or when
 *  fx_row_release is called, and dies with its batcher. */
typedef struct fx_row fx_row;         /* one request inside a batcher */
/** A pinned prefix in the KV cache, made by fx_lease_create and ended by
 *  fx_lease_release (or by fx_batcher_free). A generation-counted id like
 *  fx_row. */
typedef struct fx_lease fx_lease;     /* a pinned prefix in the KV cache */

/** @} */

/* ------------------------------------------------------------------------ */
/* Allocator and log hooks                                                  */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup hooks_api Allocator and log hooks
 * Per-handle callbacks, given at create time; the library has no global
 * configuration.
 * @{
 */

/**
 * Memory hooks for one handle.
 *
 * Every heap allocation a handle makes goes through its allocator, given at
 * create time. All three functions NULL means the C library's. Either all
 * three are set or none; a partial set is FX_ERR_INVALID_ARG.
 * realloc_fn follows realloc's contract (ptr NULL allocates; on failure the
 * old block is untouched and NULL is returned). free_fn accepts NULL.
 *
 * The struct is copied at create time; `user` must stay valid, and the
 * functions callable, until the handle is freed. Every block is freed
 * through the same hooks by the time the handle's free function returns.
 * The fx_batcher handle itself is allocated with its model's allocator;
 * everything else a batcher holds, with fx_batcher_params::allocator.
 *
 * What a hook may do: it runs on the thread making the library call, in
 * the middle of that call. It must not call into the handle it serves: the
 * batcher refuses such calls with FX_ERR_REENTRANT, the model does not
 * check. A batcher's hooks may run while the batcher's internal lock is
 * held, so they must not call fx_cancel on it either (it would wait for
 * that lock forever). Returning NULL is always safe: the call fails with
 * FX_ERR_NOMEM and the handle stays usable.
 *
 * Threads: a model's hooks are called concurrently when several threads
 * use the functions that may overlap on one model (the tokenizer and chat
 * functions), so they must then be thread-safe. A batcher's are called
 * only from the thread driving it.
 */
typedef struct fx_allocator {
    /** Returns size bytes aligned as malloc's, or NULL. */
    void *(*malloc_fn)(void *user, size_t size);
    /** Resizes ptr (NULL: allocates) as realloc does; NULL on failure. */
    void *(*realloc_fn)(void *user, void *ptr, size_t size);
    /** Frees ptr; accepts NULL. */
    void (*free_fn)(void *user, void *ptr);
    /** Passed to the three functions; never dereferenced by the library. */
    void *user;
} fx_allocator;

/** How much a log message matters; a handle's log_level passes the
 *  messages at or below it (numerically). */
typedef enum fx_log_level {
    FX_LOG_ERROR = 0,   /**< a call failed */
    FX_LOG_WARN = 1,    /**< something was worked around */
    FX_LOG_INFO = 2,    /**< what happened: a model loaded, a row failed */
    FX_LOG_DEBUG = 3    /**< per-step detail */
} fx_log_level;

/**
 * A log hook. The library never prints. Messages at or below the
 * configured level are passed here, on the thread making the call, as one
 * line without a trailing newline. `message` is valid only during the
 * call.
 *
 * What a hook may do: anything that does not call back into the handle
 * that is logging. A batcher refuses such calls with FX_ERR_REENTRANT
 * (fx_poll returns 0); fx_batcher_free from a hook is deferred: the
 * batcher is freed when the call the hook runs inside returns (that call's
 * result still arrives; do not use the handle after it). fx_cancel from a
 * log hook is allowed.
 *
 * @param user The handle's log_user.
 * @param level The message's level.
 * @param message One NUL-terminated line, valid only during the call.
 */
typedef void (*fx_log_fn)(void *user, fx_log_level level, const char *message);

/** @} */

/* ------------------------------------------------------------------------ */
/* Models                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup model_api Models
 * Loading a GGUF file and reading what it holds.
 * @{
 */

/* Flags for fx_model_params.flags. */
#define FX_MODEL_VOCAB_ONLY 0x1u /**< fx_model_params::flags: read metadata
                                    and vocabulary only: a GGUF without
                                    tensors loads, and the architecture need
                                    not be supported. Enough to tokenize and
                                    render chat templates, not for a
                                    batcher */
#define FX_MODEL_MAPPED_WEIGHTS 0x2u /**< fx_model_params::flags: compute
                                        from the file mapping, copying
                                        nothing: processes that map the
                                        same file share its pages, and the
                                        load reads no weight. Without it the
                                        float and Q8_0 matrices (and, on
                                        CPUs with AVX-512 VNNI, the
                                        block-quantized ones) are copied
                                        into huge pages and the order the
                                        kernels stream fastest (the same
                                        bits either way; decode is slower
                                        from the mapping): a slice at each
                                        fx_step from a batcher's second
                                        forward pass on, about a 16th a
                                        step, so the first token comes at
                                        once */
#define FX_MODEL_EAGER_COPY 0x4u /**< fx_model_params::flags: make that
                                    copy whole in the first
                                    fx_batcher_create over the model
                                    instead of over the first steps: a
                                    slower start, every step at full
                                    speed (ignored with
                                    FX_MODEL_MAPPED_WEIGHTS) */

/** How to load a model; prepare with fx_model_params_init. */
typedef struct fx_model_params {
    uint32_t struct_size;   /**< the caller's sizeof(fx_model_params),
                                 set by fx_model_params_init (the
                                 `_init_sized` contract) */
    uint32_t flags;         /**< FX_MODEL_*; unknown bits are FX_ERR_INVALID_ARG */
    fx_allocator allocator; /**< default: the C library's. Used for all the
                                 model allocates, for its whole life */
    fx_log_fn log_fn;       /**< default: NULL, no logging. Called only
                                 during fx_model_load */
    void *log_user;         /**< passed to log_fn */
    fx_log_level log_level; /**< default: FX_LOG_WARN */
} fx_model_params;

/**
 * Fills *params with the defaults and sets struct_size.
 *
 * The `_init_sized` contract (this header's introduction, "Versioned
 * structs"): only `size` bytes are written. Hosts call the inline
 * fx_model_params_init below.
 *
 * @param params The struct to fill; NULL is a no-op.
 * @param size Bytes at params: the caller's sizeof(fx_model_params).
 */
FX_API void fx_model_params_init_sized(fx_model_params *params, size_t size);

/**
 * Fills *params with the defaults and sets struct_size.
 *
 * Inline, so that the size written to struct_size is the one this header
 * gives the struct in the host's build: the `_init_sized` contract (this
 * header's introduction, "Versioned structs"), through
 * fx_model_params_init_sized.
 *
 * @param params The struct to fill; NULL is a no-op.
 */
static inline void fx_model_params_init(fx_model_params *params) {
    fx_model_params_init_sized(params, sizeof *params);
}

/**
 * Opens, maps and validates a GGUF file. Every count, size and offset in
 * the file is checked before it is used; a malformed file gives a specific
 * status, never a crash. On success *out_model owns the mapping until
 * fx_model_free. On failure *out_model is NULL and, when errbuf is not
 * NULL, a NUL-terminated message naming the key or tensor and the byte
 * offset is written into errbuf (truncated to errbuf_size).
 * params may be NULL for the defaults.
 *
 * The file is memory-mapped, not read: do not truncate or rewrite it while
 * the model is loaded (reading a truncated mapping raises SIGBUS). The
 * F32, F16, BF16 and Q8_0 weight matrices get a buffer, through the
 * allocator, of huge pages (as many bytes as the tensors) here, and are
 * copied into the order the kernels stream fastest by the batchers over
 * the model, on their threads, a slice in each fx_step from a batcher's
 * second forward pass on (the first runs from the mapping, and so every
 * matrix until its copy is whole), or all in the first fx_batcher_create
 * with FX_MODEL_EAGER_COPY; a copied matrix's pages of the mapping are
 * released. None of this with FX_MODEL_MAPPED_WEIGHTS. Block-quantized
 * matrices (Q4_0 to Q6_K, IQ4_NL, IQ4_XS) are copied the same way on CPUs
 * with AVX-512 VNNI (Q4_K to Q6_K, Q4_0 and IQ4_XS with AVX2 too), into
 * groups of 16 rows those kernels read without transposing; elsewhere
 * they are computed from the mapping, whose layout is what the kernels
 * read. The resident memory is the file's size either way, not twice it
 * (while the copy is being made, about a tenth more at most).
 *
 * Threads: any thread; loads are independent of each other.
 *
 * @param path The file, NUL-terminated; read during the call only.
 * @param params Load options, or NULL for the defaults.
 * @param[out] out_model The new model, or NULL on failure.
 * @param[out] errbuf Where a failure's message goes; may be NULL.
 * @param errbuf_size Bytes at errbuf, terminating NUL included.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL path or out_model, a
 *         struct_size older than the first layout, a partial allocator);
 *         FX_ERR_IO (open, stat or mmap failed); FX_ERR_BAD_MAGIC,
 *         FX_ERR_BAD_VERSION, FX_ERR_TRUNCATED, FX_ERR_TOO_LARGE,
 *         FX_ERR_BAD_TYPE, FX_ERR_BAD_TENSOR, FX_ERR_BAD_OFFSET,
 *         FX_ERR_BAD_ALIGNMENT, FX_ERR_DUPLICATE (a malformed file);
 *         FX_ERR_MISSING, FX_ERR_BAD_SHAPE, FX_ERR_BAD_HPARAMS (a
 *         well-formed file that is not a usable model); FX_ERR_BAD_VOCAB
 *         (tokenizer metadata); FX_ERR_UNSUPPORTED (architecture, weight
 *         type, tokenizer, or a newer struct_size with unknown fields
 *         set); FX_ERR_NOMEM.
 */
FX_API fx_status fx_model_load(const char *path, const fx_model_params *params,
                               fx_model **out_model, char *errbuf,
                               size_t errbuf_size);

/**
 * Releases everything the model holds. NULL is a no-op.
 *
 * While batchers still use the model, the free is deferred: the model is
 * only marked, and the last fx_batcher_free frees it. Either way the host
 * must not use the handle again (nor free it twice).
 *
 * Threads: must not overlap any other call on the model, nor
 * fx_batcher_create or fx_batcher_free over it.
 *
 * @param model The model, or NULL.
 */
FX_API void fx_model_free(fx_model *model);

/**
 * The message of the most recent failed call on this model, or "" if none
 * failed. Valid until the next call on the model. If several threads call
 * into one model, rely on the returned status and not on this message.
 *
 * Successful calls leave the message as it was. Calls that give no model
 * (model NULL) have nowhere to put one.
 *
 * @param model The model.
 * @return The message, NUL-terminated, owned by the model (never freed by
 *         the caller); a static message if model is NULL.
 */
FX_API const char *fx_model_errmsg(const fx_model *model);

/**
 * Hyperparameters read from the file. Strings stay valid while the model
 * lives. Fields the file does not set for a vocabulary-only load are 0.
 */
typedef struct fx_model_info {
    uint32_t struct_size;   /**< the caller's sizeof(fx_model_info),
                                 set by fx_model_info_init (the
                                 `_init_sized` contract) */
    const char *arch;       /**< general.architecture, e.g. "llama"; owned
                                 by the model */
    const char *name;       /**< general.name, or ""; owned by the model */
    uint32_t gguf_version;  /**< 2 or 3 */
    uint32_t vocab_only;    /**< 1 if loaded with FX_MODEL_VOCAB_ONLY */
    uint32_t n_vocab;       /**< tokens in the vocabulary */
    uint32_t n_ctx_train;   /**< context length the model was trained for */
    uint32_t n_embd;        /**< embedding (hidden) size */
    uint32_t n_layer;       /**< transformer blocks */
    uint32_t n_head;        /**< attention (query) heads */
    uint32_t n_head_kv;     /**< key/value heads (fewer than n_head: GQA) */
    uint32_t n_ff;          /**< feed-forward hidden size */
    uint32_t n_rot;         /**< RoPE dimensions per head */
    float rope_freq_base;   /**< RoPE base frequency (theta) */
    float rms_norm_eps;     /**< epsilon of the RMS norms */
    uint64_t n_params;      /**< elements over all tensors */
    uint64_t n_tensors;     /**< entries in the tensor table */
    uint64_t n_meta;        /**< metadata key/value pairs */
    uint64_t file_size;     /**< bytes */
} fx_model_info;

/**
 * Zeroes *info and sets struct_size: call it before fx_model_get_info.
 *
 * The `_init_sized` contract (this header's introduction, "Versioned
 * structs"): only `size` bytes are written. Hosts call the inline
 * fx_model_info_init below.
 *
 * @param info The struct to fill; NULL is a no-op.
 * @param size Bytes at info: the caller's sizeof(fx_model_info).
 */
FX_API void fx_model_info_init_sized(fx_model_info *info, size_t size);

/**
 * Zeroes *info and sets struct_size: call it before fx_model_get_info.
 *
 * Inline, so that the size written to struct_size is the one this header
 * gives the struct in the host's build: the `_init_sized` contract (this
 * header's introduction, "Versioned structs"), through
 * fx_model_info_init_sized.
 *
 * @param info The struct to fill; NULL is a no-op.
 */
static inline void fx_model_info_init(fx_model_info *info) {
    fx_model_info_init_sized(info, sizeof *info);
}

/**
 * Fills *info (which the caller prepared with fx_model_info_init). A
 * caller compiled against an older header gets the fields it knows.
 *
 * @param model The model.
 * @param[in,out] info Prepared by fx_model_info_init.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL model or info, or a struct_size
 *         older than the first layout).
 */
FX_API fx_status fx_model_get_info(const fx_model *model, fx_model_info *info);

/**
 * Metadata, in file order: the number of key/value pairs. Keys are
 * NUL-terminated and live as long as the model.
 *
 * @param model The model.
 * @return The count; 0 for NULL.
 */
FX_API uint64_t fx_model_meta_count(const fx_model *model);
/**
 * The key of one metadata pair, such as "general.architecture".
 *
 * @param model The model.
 * @param index 0 <= index < fx_model_meta_count(model).
 * @return The key, owned by the model and valid while it lives; NULL if
 *         model is NULL or index out of range.
 */
FX_API const char *fx_model_meta_key(const fx_model *model, uint64_t index);
/**
 * fx_model_meta_format writes the value as text: numbers in decimal,
 * strings quoted with C escapes, arrays summarized as
 * `[string x 32000: "<unk>", "<s>", "</s>", ...]`. If buf is too small the
 * text is truncated, FX_ERR_BUFFER_TOO_SMALL is returned, and *needed (if
 * not NULL) is set to the size including the NUL.
 *
 * @param model The model.
 * @param index 0 <= index < fx_model_meta_count(model).
 * @param[out] buf Where the text goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the text needs, NUL included; may be NULL.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (NULL model,
 *         index out of range, buf NULL with buf_size > 0).
 */
FX_API fx_status fx_model_meta_format(const fx_model *model, uint64_t index,
                                      char *buf, size_t buf_size,
                                      size_t *needed);

/** One entry of the tensor table. */
typedef struct fx_tensor_info {
    uint32_t struct_size;   /**< the caller's sizeof(fx_tensor_info),
                                 set by fx_tensor_info_init (the
                                 `_init_sized` contract) */
    const char *name;       /**< lives as long as the model */
    uint32_t type;          /**< the ggml type id stored in the file */
    const char *type_name;  /**< "f32", "q8_0", ...; static */
    uint32_t n_dims;        /**< 1..4 */
    uint64_t dims[4];       /**< dims[0] is the contiguous one; unused are 1 */
    uint64_t offset;        /**< byte offset of the data within the file */
    uint64_t n_bytes;       /**< size of the data */
} fx_tensor_info;

/**
 * Zeroes *info and sets struct_size: call it before fx_model_tensor_get.
 *
 * The `_init_sized` contract (this header's introduction, "Versioned
 * structs"): only `size` bytes are written. Hosts call the inline
 * fx_tensor_info_init below.
 *
 * @param info The struct to fill; NULL is a no-op.
 * @param size Bytes at info: the caller's sizeof(fx_tensor_info).
 */
FX_API void fx_tensor_info_init_sized(fx_tensor_info *info, size_t size);

/**
 * Zeroes *info and sets struct_size: call it before fx_model_tensor_get.
 *
 * Inline, so that the size written to struct_size is the one this header
 * gives the struct in the host's build: the `_init_sized` contract (this
 * header's introduction, "Versioned structs"), through
 * fx_tensor_info_init_sized.
 *
 * @param info The struct to fill; NULL is a no-op.
 */
static inline void fx_tensor_info_init(fx_tensor_info *info) {
    fx_tensor_info_init_sized(info, sizeof *info);
}
/**
 * The number of tensors in the file's tensor table.
 *
 * @param model The model.
 * @return The count; 0 for NULL.
 */
FX_API uint64_t fx_model_tensor_count(const fx_model *model);
/**
 * Describes one tensor, in file order.
 *
 * @param model The model.
 * @param index 0 <= index < fx_model_tensor_count(model).
 * @param[in,out] info Prepared by fx_tensor_info_init.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL model or info, a struct_size
 *         older than the first layout, index out of range).
 */
FX_API fx_status fx_model_tensor_get(const fx_model *model, uint64_t index,
                                     fx_tensor_info *info);

/** @} */

/* ------------------------------------------------------------------------ */
/* Tokenizer (lib/tokenizer, lib/api/api_tokenize.c)                        */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup tokenizer_api Tokenizer
 * Text to token ids and back, with the model's own vocabulary.
 *
 * A vocabulary is loaded with every model (FX_MODEL_VOCAB_ONLY loads just
 * the vocabulary and is enough to tokenize). Two kinds are supported:
 * SentencePiece (tokenizer.ggml.model "llama") and byte-level BPE ("gpt2",
 * with the pre-tokenizers "default", "gpt-2", "llama-bpe"/"llama3",
 * "qwen2", "smollm", "falcon", "deepseek-llm", "deepseek-coder",
 * "deepseek-v3", "tekken", "bloom", "poro-chat", "viking", "chatglm-bpe",
 * "gpt-4o"/"llama4" and their aliases; any other tokenizer.ggml.pre is
 * refused by name).
 * Token ids match llama.cpp's.
 * User-defined tokens (added tokens that are not control tokens: GPT-NeoX's
 * runs of spaces, Qwen2.5's `<tool_call>`) are matched in any text, as
 * llama.cpp and the Hugging Face tokenizers do; control and unknown tokens
 * only with FX_TOKENIZE_PARSE_SPECIAL.
 *
 * Loading checks every tokenizer.ggml.* key (array types and lengths,
 * special ids against the vocabulary size, byte tokens spelled `<0xHH>` and
 * unique, tokens at most 64 KiB, a known pre-tokenizer) and fails with
 * FX_ERR_BAD_VOCAB, FX_ERR_MISSING or FX_ERR_UNSUPPORTED naming the key.
 *
 * Threads: the functions below only read the vocabulary, so they may run
 * at the same time on one model from several threads (each call allocates
 * its own scratch memory through the model's allocator, which must then be
 * thread-safe). When they do, rely on the returned status rather than on
 * fx_model_errmsg.
 *
 * Invalid UTF-8 input never fails. SentencePiece vocabularies keep every
 * byte through their `<0xXX>` byte tokens, so the text round-trips -- except
 * that, as in llama.cpp, a truncated multi-byte sequence right before a
 * space takes in part of that space's U+2581 mark, which then decodes as
 * U+2581 rather than a space. BPE vocabularies read each byte that does
 * not start a valid UTF-8 sequence (overlong forms, surrogates, code
 * points above U+10FFFF, truncated sequences, stray continuation bytes) as
 * U+FFFD. NUL bytes are ordinary characters.
 * @{
 */

/* Flags for fx_tokenize. */
#define FX_TOKENIZE_ADD_SPECIAL 0x1u   /**< fx_tokenize: add BOS / EOS where
                                          the vocabulary asks for them
                                          (add_bos_token, add_eos_token) */
#define FX_TOKENIZE_PARSE_SPECIAL 0x2u /**< fx_tokenize: text equal to a
                                          control or unknown token (such as
                                          `<|im_end|>`) becomes that token;
                                          without this flag it is ordinary
                                          text (user-defined tokens are
                                          matched either way) */

/**
 * Tokenizes text[0..text_len) (need not be NUL-terminated; text may be NULL
 * when text_len is 0) into tokens[0..max_tokens). *n_tokens is always set
 * to the number of tokens the text needs. If that exceeds max_tokens,
 * FX_ERR_BUFFER_TOO_SMALL is returned and tokens holds the first
 * max_tokens of them; call again with a buffer of *n_tokens (tokens may be
 * NULL when max_tokens is 0, to ask for the count).
 * Errors: FX_ERR_INVALID_ARG (NULL model or n_tokens, unknown flags),
 * FX_ERR_TOO_LARGE (text_len above 2^31 - 1 bytes), FX_ERR_NOMEM.
 *
 * @param model The model (a vocabulary-only one is enough).
 * @param text The text; read during the call only.
 * @param text_len Bytes of text.
 * @param flags FX_TOKENIZE_*.
 * @param[out] tokens Where the ids go; may be NULL when max_tokens is 0.
 * @param max_tokens Room at tokens.
 * @param[out] n_tokens The number of tokens the text needs.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (also: tokens
 *         NULL with max_tokens > 0, text NULL with text_len > 0);
 *         FX_ERR_MISSING (the model has no vocabulary); FX_ERR_TOO_LARGE;
 *         FX_ERR_NOMEM.
 */
FX_API fx_status fx_tokenize(const fx_model *model, const char *text,
                             size_t text_len, uint32_t flags,
                             int32_t *tokens, size_t max_tokens,
                             size_t *n_tokens);

/* Flags for fx_token_to_piece and fx_detokenize. */
#define FX_DETOKENIZE_REMOVE_SPECIAL 0x1u /**< fx_detokenize: drop a leading
                                             BOS and a trailing EOS that the
                                             vocabulary adds */
#define FX_DETOKENIZE_RENDER_SPECIAL 0x2u /**< write the text of control and
                                             unknown tokens (`<s>`); without
                                             it they produce nothing */

/**
 * The bytes one token stands for: byte tokens give their byte, U+2581 is a
 * space (SentencePiece), the GPT-2 byte map is undone (BPE), user-defined
 * tokens give their text, unused ones nothing. A piece may
 * be a fragment of a UTF-8 character. Writes min(needed, buf_size) bytes,
 * no NUL terminator, and sets *n_bytes to the size needed; returns
 * FX_ERR_BUFFER_TOO_SMALL if buf_size is less (buf may be NULL when
 * buf_size is 0). Only FX_DETOKENIZE_RENDER_SPECIAL applies here.
 * Errors: FX_ERR_INVALID_ARG (NULL model or n_bytes, token out of range,
 * unknown flags).
 *
 * @param model The model.
 * @param token 0 <= token < fx_model_vocab_size(model).
 * @param flags FX_DETOKENIZE_*.
 * @param[out] buf Where the bytes go; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] n_bytes The size of the piece.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG;
 *         FX_ERR_MISSING (the model has no vocabulary).
 */
FX_API fx_status fx_token_to_piece(const fx_model *model, int32_t token,
                                   uint32_t flags, char *buf,
                                   size_t buf_size, size_t *n_bytes);

/**
 * The text of a whole sequence: the pieces back to back, except that for
 * SentencePiece vocabularies the space fx_tokenize put before the text is
 * removed again (one leading space of the first piece that has text), so
 * fx_detokenize(fx_tokenize(x)) == x for valid UTF-8 x (for SentencePiece,
 * x without U+2581, which it reads as a space). Buffer contract as
 * fx_token_to_piece. Errors: FX_ERR_INVALID_ARG (NULL model or n_bytes,
 * tokens NULL with n_tokens > 0, a token out of range, unknown flags).
 *
 * @param model The model.
 * @param tokens The ids; read during the call only.
 * @param n_tokens How many.
 * @param flags FX_DETOKENIZE_*.
 * @param[out] buf Where the text goes (no NUL terminator); may be NULL
 *             when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] n_bytes The size of the text.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG;
 *         FX_ERR_MISSING (the model has no vocabulary).
 */
FX_API fx_status fx_detokenize(const fx_model *model, const int32_t *tokens,
                               size_t n_tokens, uint32_t flags, char *buf,
                               size_t buf_size, size_t *n_bytes);

/**
 * Number of tokens in the vocabulary (0 for NULL).
 *
 * @param model The model.
 * @return Valid ids are 0 .. this - 1.
 */
FX_API uint32_t fx_model_vocab_size(const fx_model *model);

/** The special tokens fx_model_special_token can look up. */
typedef enum fx_special_token {
    FX_TOKEN_BOS = 0,  /**< beginning of sequence */
    FX_TOKEN_EOS = 1,  /**< end of sequence */
    FX_TOKEN_UNK = 2,  /**< unknown */
    FX_TOKEN_SEP = 3,  /**< separator */
    FX_TOKEN_PAD = 4,  /**< padding */
    FX_TOKEN_EOT = 5,  /**< end of turn (`<|eot_id|>`, `<|im_end|>`, ...) */
    FX_TOKEN_EOM = 6,  /**< end of message (`<|eom_id|>`) */
    FX_TOKEN_MASK = 7  /**< mask (tokenizer.ggml.mask_token_id) */
} fx_special_token;

/**
 * The id of a special token, from tokenizer.ggml.*_token_id or the
 * vocabulary kind's default (EOT/EOM also recognized by their text), or -1
 * when the vocabulary has none (or model is NULL, or `which` is unknown).
 *
 * @param model The model.
 * @param which The token to look up.
 * @return The id, or -1.
 */
FX_API int32_t fx_model_special_token(const fx_model *model,
                                      fx_special_token which);

/**
 * 1 if generation should stop at this token (EOS, EOT or EOM), else 0.
 *
 * @param model The model; NULL gives 0.
 * @param token Any id; out of range gives 0.
 * @return 1 or 0.
 */
FX_API int fx_token_is_eog(const fx_model *model, int32_t token);

/** A token's type, as GGUF numbers them (tokenizer.ggml.token_type). */
typedef enum fx_token_type_t {
    FX_TOKEN_TYPE_UNDEFINED = 0,    /**< undefined, or no such token */
    FX_TOKEN_TYPE_NORMAL = 1,       /**< ordinary text */
    FX_TOKEN_TYPE_UNKNOWN = 2,      /**< the unknown token (`<unk>`) */
    FX_TOKEN_TYPE_CONTROL = 3,      /**< control (BOS, EOS, chat markers) */
    FX_TOKEN_TYPE_USER_DEFINED = 4, /**< added by the model's authors */
    FX_TOKEN_TYPE_UNUSED = 5,       /**< reserved, never produced */
    FX_TOKEN_TYPE_BYTE = 6          /**< one raw byte (`<0x0A>`) */
} fx_token_type_t;

/**
 * The token's GGUF type (tokenizer.ggml.token_type).
 *
 * @param model The model; NULL gives FX_TOKEN_TYPE_UNDEFINED.
 * @param token Any id.
 * @return The type; FX_TOKEN_TYPE_UNDEFINED when the file leaves it
 *         undefined or the token is out of range.
 */
FX_API fx_token_type_t fx_token_type(const fx_model *model, int32_t token);

/** @} */

/* ---- end tokenizer ---- */

/* ------------------------------------------------------------------------ */
/* Chat templates (lib/chat, lib/api/api_chat.c)                            */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup chat_api Chat templates
 * A conversation rendered as the prompt an instruction-tuned model
 * expects.
 *
 * Instruction-tuned models expect their conversation in their own format,
 * given as a Jinja template in the GGUF key tokenizer.chat_template.
 * ferrox runs that template with a small interpreter of the Jinja subset
 * chat templates use, and renders it as Hugging Face transformers'
 * apply_chat_template does (jinja2 with trim_blocks and lstrip_blocks,
 * transformers' raise_exception, strftime_now and tojson), byte for byte:
 * any model's template, not only known ones. A template that does not
 * parse, raises (raise_exception, an undefined value used, ...) or exceeds
 * the interpreter's bounds is FX_ERR_BAD_TEMPLATE with the line, column
 * and reason; output or memory past the caps is FX_ERR_TOO_LARGE. The
 * bounds: a step budget (about 20 million steps plus 2000 a message),
 * nesting of 64 levels (brackets, blocks, macro calls), 16 MiB of output
 * and 64 MiB of memory per render plus 4 and 16 times the size of the
 * input, range() of at most 100000 items (jinja2's sandbox limit). Not
 * supported: {% include %}/{% extends %}/{% import %}, recursive loops,
 * integers beyond 64 bits (an error); string case conversions map
 * characters one to one (utf8proc), where Python maps a few (such as
 * U+00DF) to two.
 *
 * Template variables: messages (role and content), bos_token, eos_token
 * (the model's texts), add_generation_prompt (FX_CHAT_ADD_ASSISTANT),
 * tools and documents (None). fx_chat_apply_ex adds any others (tools,
 * enable_thinking, messages with tool calls ...) from JSON and defines
 * strftime_now (in UTC, where transformers uses the local time zone);
 * fx_chat_apply leaves strftime_now undefined, so that
 * templates that print today's date (Llama 3.1-3.3) fall back to their
 * own fixed date and the output does not change from day to day.
 *
 * A family name instead of template text selects one of ferrox's own C
 * renderers, written from each family's published template: useful for a
 * model without a template, and allocation-free. They render as the
 * family's template does, with two deliberate departures noted below.
 *
 * Families (fx_chat_family_name lists them):
 * @verbatim
   chatml            <|im_start|>role\n...<|im_end|>\n  (Qwen2/2.5, SmolLM2,
                     OpenHermes; a default system prompt the template
                     carries, like Qwen2.5's, is rendered as it does)
   qwen3             Qwen3: chatml, with an assistant message's <think>
                     block dropped before the last user query and kept
                     after it, as the Qwen3 template does
   phi4              <|im_start|>role<|im_sep|>...<|im_end|>
   llama2            Llama-2-chat:
                     [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s>
   mistral           Mistral-7B-Instruct v0.2 (HF): [INST] U [/INST]A</s>
   mistral-v1        mistralai v1: " [INST] U [/INST] A</s>"
   mistral-v3        mistralai v3: "[INST] U[/INST] A</s>"
   mistral-v3-tekken mistralai v3-tekken (Nemo): "[INST]U[/INST]A</s>"
   llama3            Llama 3:
                     <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
   llama3.1          Llama 3.1/3.2/3.3: llama3 plus the system header with
                     "Cutting Knowledge Date: December 2023" and the
                     template's fallback date "Today Date: 26 Jul 2024"
   phi3              Phi-3/3.5: <|role|>\n...<|end|>\n
   zephyr            zephyr, TinyLlama-Chat, stablelm-zephyr:
                     <|role|>\n...EOS\n
   gemma             <start_of_turn>user|model\n...<end_of_turn>\n
   deepseek          deepseek-coder-instruct: ### Instruction: / ### Response:
   deepseek3         DeepSeek V3 / R1 and R1 distills: <|User|>, <|Assistant|>
                     (written with U+FF5C fullwidth bars)
   vicuna, vicuna-orca  USER: ... ASSISTANT: ...</s>
   @endverbatim
 *
 * FX_CHAT_ADD_ASSISTANT is the template's add_generation_prompt. The
 * Llama 2, Mistral and Phi-4 templates have none: their user turn already
 * ends with the assistant's opening (`[/INST]`, `<|im_start|>assistant`...),
 * so there the flag changes nothing, as in the reference.
 *
 * fx_chat_message roles are "system", "user" and "assistant" (other
 * roles, such as "tool", go in fx_chat_apply_ex's JSON messages). Where a
 * template raises an exception (Llama 2, Mistral and Gemma need
 * user/assistant turns to alternate after an optional first system
 * message) the call fails with FX_ERR_BAD_TEMPLATE and that reason. Two
 * deliberate departures of the family names only, so that a system prompt
 * always reaches the model: the templates of Gemma 1/2 and the HF Mistral
 * v0.2 raise on a system message; the "gemma" and "mistral" families write
 * it at the head of the first user turn followed by a blank line, as Gemma
 * 3's template and Mistral's documentation do. Those templates' text
 * raises, as in transformers.
 *
 * BOS: templates that start with bos_token (Llama 2/3, Mistral, Gemma,
 * DeepSeek) are rendered WITHOUT that first BOS text, because the tokenizer
 * adds it when the model asks for BOS (tokenizer.ggml.add_bos_token), as
 * llama.cpp's renderer also does. Tokenize the result with
 * FX_TOKENIZE_ADD_SPECIAL | FX_TOKENIZE_PARSE_SPECIAL and the tokens are
 * the template's, with one BOS. Every other
 * BOS/EOS the template writes inside the conversation (Llama 2's
 * `</s><s>[INST]`, Mistral's `</s>`) is in the text. A host that
 * tokenizes without adding BOS passes FX_CHAT_WITH_BOS and gets the
 * template's full output. BOS/EOS texts are the model's own tokens; with
 * no model, the family's usual ones (`<s>`, `<|begin_of_text|>`, ...) or,
 * for a template of no known family, "" (fx_chat_apply_ex can set them).
 *
 * Threads: with a model, these functions only read it, like the tokenizer
 * functions, and may overlap on one model under the same conditions.
 * Without a model they touch no shared state and may run on any thread.
 * @{
 */

/** One message of a conversation; read during the call only. */
typedef struct fx_chat_message {
    const char *role;      /**< "system", "user" or "assistant",
                                NUL-terminated */
    const char *content;   /**< UTF-8 text */
    size_t content_len;    /**< bytes of content; 0 means NUL-terminated
                              (so { "user", "hi" } works). A NUL within an
                              explicit length is FX_ERR_INVALID_ARG. */
} fx_chat_message;

/* Flags for fx_chat_apply. */
#define FX_CHAT_ADD_ASSISTANT 0x1u /**< end with the assistant turn opener
                                      (add_generation_prompt) */
#define FX_CHAT_WITH_BOS 0x2u      /**< keep the template's leading BOS
                                      text */

/**
 * Renders msgs[0..n_msgs) with a chat template into buf, NUL-terminated.
 *   tmpl NULL: the model's tokenizer.chat_template (FX_ERR_MISSING if it
 *   has none); a family name such as "chatml": that family's renderer;
 *   anything else: template text, run by the interpreter.
 * model may be NULL when tmpl is given; then BOS/EOS texts are the
 * family's usual ones and no error message is kept (see
 * fx_chat_apply_template). *needed (if not NULL) is set to the size
 * including the NUL; buf may be NULL with buf_size 0 to ask for it. If buf
 * is too small: FX_ERR_BUFFER_TOO_SMALL, *needed set, buf holds "".
 * Errors: FX_ERR_INVALID_ARG (no messages, a NULL or unknown role, a NUL
 * in content), FX_ERR_BAD_TEMPLATE (a template that does not parse, or
 * raises for this conversation, or exceeds the step or nesting bounds),
 * FX_ERR_TOO_LARGE (output or memory caps), FX_ERR_MISSING, FX_ERR_NOMEM;
 * the model's fx_model_errmsg says which.
 *
 * Submit the result as a text prompt with FX_REQUEST_PARSE_SPECIAL, so
 * the markers it writes as text become the model's special tokens.
 *
 * @param model The model, or NULL when tmpl is given.
 * @param tmpl NULL, a family name, or template text; NUL-terminated.
 * @param msgs The conversation; read during the call only.
 * @param n_msgs At least 1.
 * @param flags FX_CHAT_*.
 * @param[out] buf Where the prompt goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the prompt needs, NUL included; may be
 *             NULL.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (also:
 *         unknown flags, buf NULL with buf_size > 0, no model and no
 *         tmpl); FX_ERR_BAD_TEMPLATE; FX_ERR_MISSING; FX_ERR_TOO_LARGE;
 *         FX_ERR_NOMEM.
 */
FX_API fx_status fx_chat_apply(const fx_model *model, const char *tmpl,
                               const fx_chat_message *msgs, size_t n_msgs,
                               uint32_t flags, char *buf, size_t buf_size,
                               size_t *needed);

/**
 * The same without a model: tmpl (a family name or template text) is
 * required, and a failure's message goes to errbuf (truncated to
 * errbuf_size; errbuf may be NULL). Allocates with the C library's
 * allocator.
 *
 * @param tmpl A family name or template text, NUL-terminated.
 * @param msgs The conversation; read during the call only.
 * @param n_msgs At least 1.
 * @param flags FX_CHAT_*.
 * @param[out] buf Where the prompt goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the prompt needs, NUL included; may be
 *             NULL.
 * @param[out] errbuf Where a failure's message goes; may be NULL.
 * @param errbuf_size Bytes at errbuf.
 * @return As fx_chat_apply, with FX_ERR_INVALID_ARG for a NULL tmpl.
 */
FX_API fx_status fx_chat_apply_template(const char *tmpl,
                                        const fx_chat_message *msgs,
                                        size_t n_msgs, uint32_t flags,
                                        char *buf, size_t buf_size,
                                        size_t *needed, char *errbuf,
                                        size_t errbuf_size);

/** Options for fx_chat_apply_ex; fill with fx_chat_options_init. */
typedef struct fx_chat_options {
    uint32_t struct_size;     /**< the caller's sizeof(fx_chat_options),
                                   set by fx_chat_options_init */
    uint32_t flags;           /**< FX_CHAT_* */
    /** A JSON object, NUL-terminated, or NULL. Its members become template
     * variables next to messages, bos_token, eos_token and
     * add_generation_prompt, overriding them: "tools" (a list of tool
     * schemas), "enable_thinking", "documents", "date_string", special
     * tokens a template reads... A "messages" member (a list of objects
     * with "role", "content" and any other field: tool_calls,
     * reasoning_content, name ...) is the conversation; msgs must then be
     * NULL with n_msgs 0. Template text only: a family name with a
     * context is FX_ERR_INVALID_ARG. */
    const char *context_json;
    /** strftime_now's clock, seconds since 1970 UTC; 0 means now. */
    int64_t now;
    /** The bos_token text, NUL-terminated; NULL for the model's (or,
     * without a model, the family's usual one, else ""). */
    const char *bos_token;
    /** The eos_token text, as bos_token. */
    const char *eos_token;
} fx_chat_options;

/**
 * Fills *opts with the defaults (no flags, no context, the current time,
 * the model's tokens) for a struct of `size` bytes; see fx_chat_options.
 *
 * @param opts The options.
 * @param size sizeof(fx_chat_options) as the caller was compiled.
 */
FX_API void fx_chat_options_init_sized(fx_chat_options *opts, size_t size);
/**
 * fx_chat_options_init_sized with this header's size.
 *
 * @param opts The options.
 */
static inline void fx_chat_options_init(fx_chat_options *opts) {
    fx_chat_options_init_sized(opts, sizeof *opts);
}

/**
 * fx_chat_apply with options: extra template variables and messages with
 * any fields (opts->context_json), strftime_now defined (the clock
 * opts->now), and bos/eos texts of the caller's choosing. This is the
 * call that renders exactly as transformers' apply_chat_template does,
 * date included. model may be NULL when tmpl is given; a failure's message
 * goes to errbuf (and, with a model, to fx_model_errmsg).
 *
 * @param model The model, or NULL when tmpl is given.
 * @param tmpl NULL (the model's template), a family name, or template
 *             text; NUL-terminated.
 * @param msgs The conversation, or NULL with n_msgs 0 when
 *             opts->context_json carries "messages".
 * @param n_msgs Messages at msgs.
 * @param opts Options; NULL for the defaults.
 * @param[out] buf Where the prompt goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the prompt needs, NUL included; may be
 *             NULL.
 * @param[out] errbuf Where a failure's message goes; may be NULL.
 * @param errbuf_size Bytes at errbuf.
 * @return As fx_chat_apply; FX_ERR_INVALID_ARG also for context_json that
 *         is not a JSON object, messages given twice or not at all;
 *         FX_ERR_UNSUPPORTED for options from a newer header with members
 *         this library does not know set.
 */
FX_API fx_status fx_chat_apply_ex(const fx_model *model, const char *tmpl,
                                  const fx_chat_message *msgs, size_t n_msgs,
                                  const fx_chat_options *opts, char *buf,
                                  size_t buf_size, size_t *needed,
                                  char *errbuf, size_t errbuf_size);

/**
 * Which family a template is: tmpl as for fx_chat_apply (model may be
 * NULL when tmpl is given). *family is a static name like "llama3", or
 * "jinja" for template text that resembles no family (it is still
 * rendered, by the interpreter).
 *
 * @param model The model, or NULL when tmpl is given.
 * @param tmpl NULL (the model's template), a family name, or template
 *             text.
 * @param[out] family The family's static name; NULL on failure.
 * @return FX_OK; FX_ERR_INVALID_ARG (family NULL, or no model and no
 *         tmpl); FX_ERR_MISSING (the model has no template);
 *         FX_ERR_BAD_TEMPLATE (template text that does not parse).
 */
FX_API fx_status fx_chat_detect(const fx_model *model, const char *tmpl,
                                const char **family);

/**
 * The families by index, 0 <= index < fx_chat_family_count(); NULL past
 * the end. Each name is accepted as tmpl.
 *
 * @return The number of families.
 */
FX_API size_t fx_chat_family_count(void);
/**
 * The name of one family, such as "chatml".
 *
 * @param index 0 <= index < fx_chat_family_count().
 * @return A static name, or NULL past the end.
 */
FX_API const char *fx_chat_family_name(size_t index);

/**
 * The token ids that end an assistant turn for this model under its chat
 * template (tmpl as for fx_chat_apply), to use as default stop tokens:
 * the family's end-of-turn tokens that the vocabulary has (`<|im_end|>`,
 * `<|eot_id|>`, `<|end|>`, `<end_of_turn>`, ...) and the model's EOS, without
 * duplicates. Writes up to cap ids and sets *n to the number there are;
 * FX_ERR_BUFFER_TOO_SMALL when that is more than cap (ids may be NULL
 * when cap is 0). FX_ERR_MISSING if the model has no vocabulary.
 *
 * A family whose end-of-turn marker is not a token of this vocabulary
 * (chatml on a Llama 2 vocabulary) contributes nothing here: use
 * fx_chat_stop_strings for it as well. For a template of no known family
 * the marker is found by rendering a short conversation and taking the
 * special-token-looking text (<|...|>, <...>, [...] or the EOS text)
 * that follows the assistant's message.
 *
 * @param model The model.
 * @param tmpl NULL (the model's template), a family name, or template
 *             text.
 * @param[out] ids Where the ids go; may be NULL when cap is 0.
 * @param cap Room at ids (8 is always enough).
 * @param[out] n The number of ids.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (NULL model
 *         or n, ids NULL with cap > 0); FX_ERR_MISSING (no vocabulary, or
 *         tmpl NULL and the model has no template); FX_ERR_BAD_TEMPLATE.
 */
FX_API fx_status fx_model_chat_stop_tokens(const fx_model *model,
                                           const char *tmpl, int32_t *ids,
                                           size_t cap, size_t *n);

/**
 * The texts that end an assistant turn in the template's family, for a
 * host matching stop strings without a model: static strings, written up
 * to cap into out, *n set to how many there are (FX_ERR_BUFFER_TOO_SMALL
 * when more than cap). For a template of no known family: the marker it
 * writes after an assistant message (as fx_model_chat_stop_tokens finds
 * it) when that is one of the well-known end-of-turn markers, else none.
 *
 * @param tmpl A family name or template text (not NULL).
 * @param[out] out Where the static strings go; may be NULL when cap is 0.
 * @param cap Room at out (8 is always enough).
 * @param[out] n The number of strings.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL (out holds the first cap);
 *         FX_ERR_INVALID_ARG (NULL tmpl or n, out NULL with cap > 0);
 *         FX_ERR_BAD_TEMPLATE. No message is kept anywhere.
 */
FX_API fx_status fx_chat_stop_strings(const char *tmpl, const char **out,
                                      size_t cap, size_t *n);

/** @} */

/* ---- end chat ---- */

/* ------------------------------------------------------------------------ */
/* Structured output: JSON Schema to grammar                                */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup schema_api Structured output
 * JSON Schema to a GBNF grammar for fx_request.grammar.
 * @{
 */

/**
 * Converts a JSON Schema to GBNF text that fx_request.grammar accepts (root
 * rule "root"), so a row's output is one JSON value the schema allows. The
 * text is plain GBNF: print it, edit it, or cache it.
 *
 * The subset, what llama.cpp's converter follows: `type` (a name or a
 * list of names), `properties`, `required`, `additionalProperties` (a
 * boolean or a schema), `items`, `prefixItems`, `minItems`, `maxItems`,
 * `minLength`, `maxLength`, `enum`, `const`, `anyOf`, `oneOf`, `allOf`,
 * `$ref` to a JSON pointer into the same document (`#/$defs/...`,
 * `#/definitions/...`; recursion works), the boolean schemas, and:
 *  - `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`
 *    (numbers, or draft-4 booleans) on integers: an exact range, digit
 *    by digit, either sign, one- or two-sided; bounds round inwards (an
 *    integer >= 2.5 is >= 3). `{"type":"integer","minimum":0,
 *    "maximum":100}` accepts exactly 0 .. 100. Integers have at most 16
 *    digits, as without bounds; "-0" and leading zeros are never
 *    accepted (llama.cpp takes "-0" when a range spans zero: one
 *    spelling per value is what a host parsing the output wants).
 *  - the same keywords on numbers when the bounds are whole numbers
 *    (`0`, `-3`, `1e1`): exact, with the fraction's digits as without
 *    bounds and no exponent. Other number bounds are an error naming the
 *    keyword (llama.cpp ignores number bounds).
 *  - `pattern`, anchored `^...$` (as llama.cpp requires): literals and
 *    backslash escapes (t n r f v 0, xHH, uHHHH, escaped punctuation),
 *    classes with ranges and negation, the shorthands d w s D W S, `.`
 *    (not a line break), groups (plain, `(?:...)`, named), `|`, `? * +`,
 *    `{m}` `{m,}` `{m,n}` `{,n}` with counts up to 1000; lazy and
 *    possessive forms match as greedy ones. Backreferences, lookaround,
 *    word boundaries, inline flags and Unicode property classes (p and
 *    P) are an error naming the construct; so are groups nested past 40,
 *    a class of more than 128 ranges, repetitions expanding past 262,144
 *    grammar elements, and an unbounded repetition of what can be empty.
 *    The pattern applies to the string's characters; in the output,
 *    characters JSON escapes (quote, backslash, controls, DEL) are
 *    escaped, the others written as themselves.
 *  - `format` `date`, `time`, `date-time` and `uuid` (also `uuid1` ..
 *    `uuid5`) as llama.cpp writes them (a date's day is 01..31 whatever
 *    the month; a time needs `Z` or an offset). Other formats are
 *    annotations. `pattern`, a grammar `format` and `minLength` /
 *    `maxLength` do not combine: two of them on one string are an error.
 *  - `allOf` of one schema is that schema; of several, each an object
 *    schema (or a `$ref` to one), they merge into one object: the
 *    properties and the required names united, together with the
 *    schema's own; a property two elements describe differently is an
 *    error, as is any keyword an object merge cannot take. The merged
 *    object's other members follow the schema's own
 *    `additionalProperties` (none when it is not set).
 *
 * Annotations (`title`, `description`, `default`, `examples`, ...) and
 * unknown keywords are ignored, as JSON Schema asks. Keywords a grammar
 * cannot follow (`multipleOf`, `uniqueItems`, `not`, `if`,
 * `patternProperties`, ...) are an error that names the keyword and where
 * it is: never silently dropped. A schema without `type` takes the type
 * its keywords imply (object, array, string for `pattern` or a grammar
 * `format`, number for the bounds), else any value.
 *
 * Choices, the same as llama.cpp's converter makes: an object that lists
 * `properties` and does not set `additionalProperties` allows no other
 * members; members come in `properties` order, required ones first, then
 * the optional ones, then other members; another member's name is none
 * of the listed ones (spelled without escapes up to the first character
 * where it differs from every listed name); every `prefixItems` entry is
 * required. Whitespace is allowed between tokens but not after the
 * top-level value, so the grammar is complete at its last character and
 * the row ends there: a schema whose language is finite always ends by
 * itself.
 *
 * Buffer contract as fx_chat_apply: the grammar is written NUL-terminated;
 * *needed (if not NULL) is set to its size including the NUL; buf may be
 * NULL with buf_size 0 to ask for the size; if buf is too small the call
 * returns FX_ERR_BUFFER_TOO_SMALL and buf holds "". Needs no model and
 * keeps no state: any thread may call it at any time.
 *
 * @param schema The schema, UTF-8 JSON (at most 1 MiB, nested at most 64
 *               deep). Read during the call only.
 * @param schema_len Bytes of schema; 0 means NUL-terminated.
 * @param[out] buf Where the grammar goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the grammar needs, NUL included; may be
 *                    NULL.
 * @param[out] errbuf On failure, why (for a schema: the JSON pointer
 *                    where, e.g. "json schema at /properties/age:
 *                    unsupported keyword multipleOf"; for bad JSON: line and
 *                    column), truncated to errbuf_size; may be NULL.
 * @param errbuf_size Bytes at errbuf.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (NULL schema,
 *         buf NULL with buf_size > 0, text that is not JSON, or a schema
 *         outside the subset); FX_ERR_NOMEM.
 */
FX_API fx_status fx_json_schema_to_grammar(const char *schema,
                                           size_t schema_len, char *buf,
                                           size_t buf_size, size_t *needed,
                                           char *errbuf, size_t errbuf_size);

/** One tool a model may call (fx_tools_to_grammar). */
typedef struct fx_tool {
    const char *name;       /**< 1-64 of [A-Za-z0-9_.-], NUL-terminated */
    const char *parameters; /**< JSON Schema of its arguments (the subset of
                                 fx_json_schema_to_grammar), NUL-terminated;
                                 NULL: any JSON object */
} fx_tool;

/** How a model family writes a tool call. */
typedef enum fx_tool_format {
    /** `<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>`, a
     * block per call (up to 8): Qwen 2.5 and 3, Hermes 2 Pro, SmolLM3. */
    FX_TOOL_FORMAT_HERMES = 0,
    /** `{"name": N, "parameters": {...}}`: Llama 3.1 to 3.3. */
    FX_TOOL_FORMAT_LLAMA3 = 1,
    /** `[TOOL_CALLS][{"name": N, "arguments": {...}}, ...]` (up to 8
     * calls): Mistral. */
    FX_TOOL_FORMAT_MISTRAL = 2
} fx_tool_format;

/**
 * The grammar of a call to one of tools, in format, for a lazy grammar:
 * put it in fx_request.grammar and fx_tool_format_trigger(format) in
 * fx_request.grammar_triggers, and the model answers in prose or, when it
 * starts a call, calls one of the tools with arguments its schema allows
 * (the name as a JSON `const`, then the arguments; members in the
 * schema's order). The chat template shows the model the tools (Jinja's
 * `tools`).
 *
 * Buffer contract as fx_json_schema_to_grammar. Needs no model and keeps
 * no state.
 *
 * @param tools The tools; read during the call only.
 * @param n_tools 1 to 128.
 * @param format FX_TOOL_FORMAT_*.
 * @param[out] buf Where the grammar goes; may be NULL when buf_size is 0.
 * @param buf_size Bytes at buf.
 * @param[out] needed The size the grammar needs, NUL included; may be
 *                    NULL.
 * @param[out] errbuf On failure, why (naming the tool), truncated to
 *                    errbuf_size; may be NULL.
 * @param errbuf_size Bytes at errbuf.
 * @return FX_OK; FX_ERR_BUFFER_TOO_SMALL; FX_ERR_INVALID_ARG (no tools or
 *         more than 128, a bad name, an unknown format, a parameters schema
 *         outside the subset, buf NULL with buf_size > 0); FX_ERR_NOMEM.
 */
FX_API fx_status fx_tools_to_grammar(const fx_tool *tools, size_t n_tools,
                                     fx_tool_format format, char *buf,
                                     size_t buf_size, size_t *needed,
                                     char *errbuf, size_t errbuf_size);

/**
 * The text a format's tool call starts with ("<tool_call>", "{\"name\"",
 * "[TOOL_CALLS]"): the trigger for its lazy grammar.
 *
 * @param format FX_TOOL_FORMAT_*.
 * @return A static string; NULL for an unknown format.
 */
FX_API const char *fx_tool_format_trigger(fx_tool_format format);

/** @} */

/* ------------------------------------------------------------------------ */
/* Batcher: submit / step / poll                                            */
/* ------------------------------------------------------------------------ */

/**
 * @defgroup batcher_api Batcher
 * Many requests over one model, driven from the host's loop.
 *
 * A batcher runs many requests ("rows") over one model from the host's own
 * loop:
 * @verbatim
       fx_submit(b, &request, &row)   any time; cheap; never runs the model
       fx_step(b)                     one bounded tick: admit, prefill, decode
       fx_poll(b, &event)             text chunks and finished rows, in order
   @endverbatim
 *
 * Threads: fx_cancel may be called from any thread at any time. Every other
 * batcher call must come from one thread at a time (the host's loop). The
 * batcher starts n_threads - 1 worker threads at creation and no others.
 *
 * Determinism: with FX_BATCHER_FAST unset, a row's tokens depend only on its
 * own request (prompt, seed, settings) -- not on the other rows, on the
 * step budget, on prefix-cache hits, or on the thread count.
 *
 * A row handle is a generation-counted id, not a pointer: once a row is
 * reaped (its DONE event polled) or released, its handle is stale and every
 * call given it returns FX_ERR_STALE_HANDLE, even after its slot is reused.
 * A row or lease handle given to a batcher that did not issue it is
 * FX_ERR_STALE_HANDLE too (0 from fx_lease_ready and fx_lease_pinned).
 *
 * Prefix cache: when a row ends, its tokens (prompt and output) are
 * published in whole KV blocks; a later request whose prompt starts with
 * the same tokens adopts those blocks instead of computing them
 * (fx_usage::cached_tokens). Cached blocks stay until the KV budget needs
 * the room (least recently used first); fx_lease_create pins a prefix so
 * that it is never evicted.
 * @{
 */

/* Flags for fx_batcher_params.flags. */
#define FX_BATCHER_NO_PREFIX_CACHE 0x1u /**< never adopt or publish
                                           prefixes (leases are then never
                                           pinned) */
#define FX_BATCHER_FAST 0x2u /**< large F32 matmuls on OpenBLAS (loaded
                                by fx_batcher_create; without it, or where
                                our kernels are faster, nothing changes):
                                faster prefill, but a row's last bits (and
                                so its tokens) may depend on the batch.
                                OpenBLAS runs on its own threads
                                (OPENBLAS_NUM_THREADS), besides n_threads */
/** Keys and values stored as f16 (llama.cpp's default cache type) instead
 * of f32: half the KV memory per position, so twice the rows or context
 * for the same kv_bytes, and half the bytes a decode step reads from the
 * cache. Each key and value is rounded to the nearest f16 once, when it is
 * stored; attention computes in F32. Determinism holds as without it: a
 * row's tokens still do not depend on the batch, chunking or threads. */
#define FX_BATCHER_KV_F16 0x4u

/** The largest fx_batcher_params.kv_bytes: 1 TiB. */
#define FX_BATCHER_MAX_KV_BYTES ((uint64_t)1 << 40)

/** How to make a batcher; prepare with fx_batcher_params_init. */
typedef struct fx_batcher_params {
    uint32_t struct_size;   /**< the caller's sizeof(fx_batcher_params),
                                 set by fx_batcher_params_init (the
                                 `_init_sized` contract) */
    uint32_t flags;             /**< FX_BATCHER_*; unknown bits are
                                     FX_ERR_INVALID_ARG */
    uint32_t max_rows;          /**< rows admitted at once; default 16, at
                                     most 4096. More may be queued */
    uint32_t max_step_tokens;   /**< tokens one fx_step may run through the
                                   model (bounds a step's latency); default
                                   256 (or max_rows if larger), at most
                                   65536. Decode tokens go first, in
                                   admission order; prompt chunks fill the
                                   rest */
    uint32_t n_ctx;             /**< most positions one row may use (prompt
                                   and output); default the model's
                                   training context, capped at 4096 */
    uint32_t block_tokens;      /**< KV block size in positions; default
                                     16. Also the granularity of prefix
                                     reuse */
    /** Memory for the KV cache, allocated once at create. K and V take
     * 8 * n_layer * n_head_kv * head size bytes per position (half that
     * with FX_BATCHER_KV_F16) -- except
     * that where a model has sliding-window layers (Gemma 2 and 3, Phi-3
     * mini), each row keeps those layers for its last window +
     * max_step_tokens positions only (a Gemma 3 row of 8k positions
     * needs about a quarter of the full size). Default:
     * enough for max_rows rows of n_ctx positions, but at most 2 GiB --
     * and never less than one row of n_ctx positions (so a model whose one
     * row needs more than 2 GiB gets exactly one row). Rows are admitted
     * while their blocks fit, so with the cap fewer than max_rows may run
     * at once; set kv_bytes to choose. Pinned leases (fx_lease_create)
     * count against it: a request that does not fit in what they and the
     * running rows leave waits, with everything submitted after it, until
     * rows end or a lease is released. At most FX_BATCHER_MAX_KV_BYTES
     * (FX_ERR_INVALID_ARG above it); a size the machine cannot hold is
     * FX_ERR_NOMEM, before anything of that size is zeroed. */
    uint64_t kv_bytes;
    uint32_t n_threads;         /**< default 1 (no threads are created); at
                                     most 256 */
    fx_allocator allocator;     /**< default: the C library's */
    fx_log_fn log_fn;           /**< default: NULL. Called from fx_step and
                                     the other batcher calls, on their
                                     thread */
    void *log_user;             /**< passed to log_fn */
    fx_log_level log_level;     /**< default FX_LOG_WARN; FX_LOG_INFO also
                                     says why a row failed */
} fx_batcher_params;

/**
 * Fills *params with the defaults and sets struct_size.
 *
 * The `_init_sized` contract (this header's introduction, "Versioned
 * structs"): only `size` bytes are written. Hosts call the inline
 * fx_batcher_params_init below.
 *
 * @param params The struct to fill; NULL is a no-op.
 * @param size Bytes at params: the caller's sizeof(fx_batcher_params).
 */
FX_API void fx_batcher_params_init_sized(fx_batcher_params *params,
                                        size_t size);

/**
 * Fills *params with the defaults and sets struct_size.
 *
 * Inline, so that the size written to struct_size is the one this header
 * gives the struct in the host's build: the `_init_sized` contract (this
 * header's introduction, "Versioned structs"), through
 * fx_batcher_params_init_sized.
 *
 * @param params The struct to fill; NULL is a no-op.
 */
static inline void fx_batcher_params_init(fx_batcher_params *params) {
    fx_batcher_params_init_sized(params, sizeof *params);
}

/**
 * Creates a batcher over a loaded (not vocabulary-only) model. The model
 * must outlive it; fx_model_free on a model that batchers still use only
 * marks it, and the last fx_batcher_free frees it. Errors as fx_model_load
 * (message in errbuf), plus FX_ERR_INVALID_ARG for unusable parameters.
 *
 * Allocates the KV cache (kv_bytes) and the step scratch here, once, and
 * starts n_threads - 1 worker threads.
 *
 * Threads: several batchers may run over one model, each on its own
 * thread; but fx_batcher_create and fx_batcher_free update the model's
 * count of batchers, so they must not overlap each other (nor
 * fx_model_free) for the same model.
 *
 * @param model The model; must have weights.
 * @param params Options, or NULL for the defaults.
 * @param[out] out_batcher The new batcher, or NULL on failure.
 * @param[out] errbuf Where a failure's message goes; may be NULL.
 * @param errbuf_size Bytes at errbuf.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL model or out_batcher, a
 *         vocabulary-only model, unknown flags, parameters out of range,
 *         kv_bytes below one block or above FX_BATCHER_MAX_KV_BYTES, a
 *         partial allocator, a struct_size
 *         older than the first layout); FX_ERR_UNSUPPORTED (a newer
 *         struct_size with unknown fields set); FX_ERR_NOMEM (often: the
 *         KV cache; lower kv_bytes, max_rows or n_ctx).
 */
FX_API fx_status fx_batcher_create(fx_model *model,
                                   const fx_batcher_params *params,
                                   fx_batcher **out_batcher, char *errbuf,
                                   size_t errbuf_size);

/**
 * Ends every row without events and frees everything. NULL is a no-op.
 *
 * Leases and row handles die with it; the event text and token pointers
 * it handed out become invalid. Joins the worker threads. Frees the model
 * too if fx_model_free was called on it and this was its last batcher.
 * Called from inside one of the batcher's own callbacks (a log or
 * allocator hook) it is deferred: the batcher is freed when the call that
 * hook runs inside returns (an fx_poll then returns 0).
 *
 * Threads: must not overlap any other call on the batcher, fx_cancel
 * included.
 *
 * @param batcher The batcher, or NULL.
 */
FX_API void fx_batcher_free(fx_batcher *batcher);

/**
 * The message of the most recent failed call on this batcher, or "".
 *
 * Successful calls leave it as it was. fx_cancel records no message, and
 * a row that fails during fx_step reports through its DONE event's status
 * (and the log, at FX_LOG_INFO), not here.
 *
 * @param batcher The batcher.
 * @return The message, owned by the batcher, valid until its next call;
 *         a static message if batcher is NULL.
 */
FX_API const char *fx_batcher_errmsg(const fx_batcher *batcher);

/* Flags for fx_request.flags. */
#define FX_REQUEST_IGNORE_EOS 0x1u     /**< keep going past end-of-generation
                                          tokens (until max_tokens or a
                                          stop); a completed grammar still
                                          ends the row */
#define FX_REQUEST_PARSE_SPECIAL 0x2u  /**< special-token text in a text
                                          prompt becomes the special token
                                          (for chat-template output) */
#define FX_REQUEST_NO_BOS 0x4u         /**< do not add BOS to a text prompt
                                          even if the vocabulary asks for
                                          it */
#define FX_REQUEST_JSON 0x8u           /**< the output is one JSON value (RFC
                                          8259; at most 20 whitespace
                                          characters in a row): a built-in
                                          grammar. Not with `grammar` */

/**
 * A per-token logit bias (fx_request.logit_bias): added to the token's
 * logit before every sampler; -INFINITY bans the token.
 */
typedef struct fx_logit_bias {
    int32_t token;              /**< 0 <= token < the vocabulary size */
    float bias;                 /**< added to the logit */
} fx_logit_bias;

/** One entry of a token's log-probabilities (fx_event.top). */
typedef struct fx_token_logprob {
    int32_t token;              /**< the token */
    float logprob;              /**< natural log of the probability */
} fx_token_logprob;

#define FX_MAX_LOGPROBS 20     /**< most alternatives fx_request.n_logprobs
                                  may ask for */

/**
 * One generation request; prepare with fx_request_init. fx_submit copies
 * everything it needs: the caller's buffers may be reused as soon as it
 * returns.
 */
typedef struct fx_request {
    uint32_t struct_size;   /**< the caller's sizeof(fx_request),
                                 set by fx_request_init (the
                                 `_init_sized` contract) */
    uint32_t flags;                /**< FX_REQUEST_*; unknown bits are
                                        FX_ERR_INVALID_ARG */
    /** The prompt: text (tokenized at submit, with BOS as the vocabulary
     * says), or token ids when `prompt` is NULL. Copied at submit. Need
     * not be NUL-terminated. With a lease, the prompt continues the
     * lease's text and no BOS is added. */
    const char *prompt;
    size_t prompt_len;             /**< bytes of prompt */
    const int32_t *prompt_tokens;  /**< ids, used when prompt is NULL;
                                        copied */
    size_t n_prompt_tokens;        /**< how many ids */
    uint32_t max_tokens;           /**< tokens to generate at most, 1..n_ctx;
                                      default 256 */
    float temperature;             /**< <= 0: greedy; default 0 */
    uint32_t top_k;                /**< 0: off (default) */
    float top_p;                   /**< 1: off (default) */
    float min_p;                   /**< 0: off (default) */
    uint64_t seed;                 /**< the row's random stream; default 0 */
    /** Stop strings (UTF-8, NUL-terminated): generation ends when the text
     * contains one; it is not emitted. Text that could be the start of a
     * stop string is held back until it is known not to be. A character
     * cut off when the row ends becomes U+FFFD, and that may complete a
     * stop string too: the DONE then says FX_FINISH_STOP, whatever ended
     * the row. Copied. */
    const char *const *stop;
    size_t n_stop;                 /**< how many stop strings */
    /** Extra token ids that end generation (EOS and EOT always do, unless
     * FX_REQUEST_IGNORE_EOS). Copied. */
    const int32_t *stop_tokens;
    size_t n_stop_tokens;          /**< how many stop tokens */
    /** A pinned prefix (fx_lease_create): the prompt continues it. NULL for
     * none. A request submitted while the lease is still being computed
     * waits in the queue for it (and, to keep submit order, so does
     * everything submitted after it). */
    fx_lease *lease;
    void *user;                    /**< returned in this row's events; never
                                        dereferenced by the library */
    /* Fields below were added after the first layout; a request whose
     * struct_size ends before them gets their defaults. */
    /** A GBNF grammar (llama.cpp's dialect) the output must match: each
     * step only tokens that continue it may be sampled, an end-of-
     * generation token only once it is complete (and it is forced when
     * nothing else may follow). Compiled at submit; an error refuses the
     * request with FX_ERR_GRAMMAR and "line L, column C: ..." in
     * fx_batcher_errmsg. If no token can continue it, the row alone ends
     * with FX_FINISH_ERROR / FX_ERR_GRAMMAR. NULL: none. Copied. */
    const char *grammar;
    size_t grammar_len;            /**< bytes of grammar */
    const char *grammar_root;      /**< start rule, NUL-terminated; NULL:
                                      "root" */
    /* More samplers, applied in llama.cpp's default order: logit bias,
     * penalties, top-k, typical, top-p, min-p, temperature, draw. */
    float typical_p;               /**< locally typical sampling; 1: off
                                      (default) */
    float repeat_penalty;          /**< divides positive logits (multiplies
                                      negative ones) of tokens seen in the
                                      last penalty_last_n; 1: off
                                      (default) */
    float presence_penalty;        /**< subtracted once from seen tokens; 0:
                                      off (default) */
    float frequency_penalty;       /**< subtracted per occurrence; 0: off
                                      (default) */
    uint32_t penalty_last_n;       /**< tokens (prompt included) the
                                      penalties look back; default 64 */
    const fx_logit_bias *logit_bias; /**< copied; ids must be in range.
                                      A banned token (-INFINITY) is never
                                      sampled: a step where every token
                                      that may come next is banned ends the
                                      row with FX_FINISH_ERROR /
                                      FX_ERR_ALL_BANNED */
    size_t n_logit_bias;           /**< how many biases */
    /** 0 (default): off. 1..FX_MAX_LOGPROBS: each generated token also
     * arrives as an FX_EVENT_TOKEN event with its log-probability and this
     * many most likely alternatives. */
    uint32_t n_logprobs;
    /** A lazy grammar (with `grammar` or FX_REQUEST_JSON): the row samples
     * freely until its output contains one of these strings (or one of
     * grammar_trigger_tokens is sampled), as a tool call starts when the
     * model decides. The grammar then reads the output from the start of
     * the first trigger to the end of the token that completed it -- so
     * it must start with the trigger (`root ::= "<tool_call>" ...`) --
     * and constrains every later token; output it cannot read ends the
     * row with FX_FINISH_ERROR / FX_ERR_GRAMMAR. Text before the trigger
     * streams as usual; fx_event.grammar_start says where the grammar took
     * over. NULL / 0 (default): the grammar applies from the first token.
     * Up to 64 strings of 1-256 bytes (NUL-terminated) and 64 tokens.
     * Copied. */
    const char *const *grammar_triggers;
    size_t n_grammar_triggers;     /**< how many trigger strings */
    const int32_t *grammar_trigger_tokens; /**< trigger token ids; copied */
    size_t n_grammar_trigger_tokens; /**< how many trigger tokens */
} fx_request;

/**
 * Fills *request with the defaults (see each field) and sets struct_size.
 *
 * The `_init_sized` contract (this header's introduction, "Versioned
 * structs"): only `size` bytes are written. Hosts call the inline
 * fx_request_init below.
 *
 * @param request The struct to fill; NULL is a no-op.
 * @param size Bytes at request: the caller's sizeof(fx_request).
 */
FX_API void fx_request_init_sized(fx_request *request, size_t size);

/**
 * Fills *request with the defaults (see each field) and sets struct_size.
 *
 * Inline, so that the size written to struct_size is the one this header
 * gives the struct in the host's build: the `_init_sized` contract (this
 * header's introduction, "Versioned structs"), through
 * fx_request_init_sized.
 *
 * @param request The struct to fill; NULL is a no-op.
 */
static inline void fx_request_init(fx_request *request) {
    fx_request_init_sized(request, sizeof *request);
}

/**
 * Queues a request and returns its row handle at once. Tokenizes and
 * checks; never runs the model and never blocks.
 * Errors: FX_ERR_INVALID_ARG (bad fields, empty prompt, token out of
 * range), FX_ERR_NO_ROOM (prompt + max_tokens longer than n_ctx, or more
 * KV blocks than the whole cache: it could never run; a text prompt too
 * long to fit whatever its tokens is refused before it is tokenized, so
 * its size costs no memory), FX_ERR_STALE_HANDLE
 * (a released lease), FX_ERR_GRAMMAR (the grammar does not compile),
 * FX_ERR_NOMEM, FX_ERR_REENTRANT.
 *
 * A request that fits the context but not the KV blocks free right now is
 * not an error: it waits in the queue until rows end and free them.
 *
 * @param batcher The batcher.
 * @param request The request; read during the call only.
 * @param[out] out_row The row's handle, or NULL on failure. Its events
 *             carry it in fx_event::row.
 * @return FX_OK or one of the errors above (FX_ERR_INVALID_ARG also for a
 *         NULL request or out_row, unknown flags, both grammar and
 *         FX_REQUEST_JSON, n_logprobs above FX_MAX_LOGPROBS, a NaN
 *         sampling parameter, a struct_size older than the first layout;
 *         FX_ERR_UNSUPPORTED for a newer struct_size with unknown fields
 *         set). The reason is in fx_batcher_errmsg.
 */
FX_API fx_status fx_submit(fx_batcher *batcher, const fx_request *request,
                           fx_row **out_row);

/**
 * One tick: ends cancelled rows, admits queued requests in submit order
 * while rows and KV blocks allow, runs one forward pass that mixes prompt
 * chunks with one decode token of every generating row (at most
 * max_step_tokens tokens), samples, matches stops, and ends finished rows.
 * Returns FX_OK when there was nothing to do as well. Per-row outcomes
 * arrive as events; only batcher-wide failures are returned here. A row
 * whose text cannot be queued (no memory) never ends without it: it ends
 * with FX_FINISH_ERROR / FX_ERR_NOMEM instead, whatever else ended it
 * (max_tokens, a stop, a cancel).
 *
 * It blocks the calling thread for the forward pass and the sampling
 * (both on n_threads threads: rows without a grammar are sampled on all
 * of them at once, each row's token the same whichever thread samples
 * it); max_step_tokens bounds how long.
 *
 * @param batcher The batcher.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL); FX_ERR_REENTRANT; the status
 *         of a failed forward pass (the rows in it end with
 *         FX_FINISH_ERROR, the others go on); FX_ERR_INTERNAL (a
 *         consistency check failed: this and every later step refuses to
 *         run, and the batcher can only be freed).
 */
FX_API fx_status fx_step(fx_batcher *batcher);

/**
 * Rows queued or running (not yet ended).
 *
 * Counts the internal rows that compute leases too, so a loop "step while
 * pending" also finishes them. A row that has ended but whose DONE has not
 * been polled yet no longer counts: drain fx_poll after the last step.
 *
 * @param batcher The batcher; NULL gives 0.
 * @return The number of rows.
 */
FX_API uint32_t fx_batcher_pending(const fx_batcher *batcher);

/** What an fx_event carries. */
typedef enum fx_event_type {
    FX_EVENT_NONE = 0,  /**< not produced by fx_poll */
    FX_EVENT_TEXT = 1,  /**< a chunk of a row's output */
    FX_EVENT_DONE = 2,  /**< the row ended; its last event */
    FX_EVENT_TOKEN = 3  /**< a generated token with its log-probabilities
                           (requests with n_logprobs > 0 only). It comes
                           before the TEXT event that first carries any
                           of its text (text may be held back for a stop
                           string or a split character). Stop and EOS
                           tokens get one too */
} fx_event_type;

/** Why a row ended (fx_event::finish). */
typedef enum fx_finish_reason {
    FX_FINISH_NONE = 0,       /**< not ended (never in a DONE event) */
    FX_FINISH_EOS = 1,        /**< an end-of-generation or stop token, or
                                   a completed grammar */
    FX_FINISH_STOP = 2,       /**< a stop string (also one completed by
                                   the U+FFFD of a character cut off at
                                   the end, fx_request::stop) */
    FX_FINISH_LENGTH = 3,     /**< max_tokens or the context reached */
    FX_FINISH_CANCELLED = 4,  /**< fx_cancel */
    FX_FINISH_ERROR = 5       /**< this row failed; see fx_event.status */
} fx_finish_reason;

/** A finished row's accounting (fx_event::usage), from its own clock. */
typedef struct fx_usage {
    uint32_t prompt_tokens;     /**< including the lease's (and BOS) */
    uint32_t cached_tokens;     /**< of which taken from the prefix cache:
                                     whole KV blocks (a multiple of
                                     block_tokens), never the whole prompt
                                     (its last token is always computed) */
    uint32_t completion_tokens; /**< generated, a stop token included */
    double queue_seconds;       /**< submit to admission */
    double ttft_seconds;        /**< admission to first generated token (0
                                     if none) */
    double total_seconds;       /**< admission to the end */
} fx_usage;

/**
 * One thing that happened to a row, taken by fx_poll. Pointers in it are
 * owned by the batcher and valid until the next fx_poll (or
 * fx_batcher_free); copy what must live longer.
 */
typedef struct fx_event {
    fx_event_type type;         /**< which fields below are set */
    fx_row *row;                /**< the row; after a DONE it is already
                                     stale: compare it, do not pass it */
    void *user;                 /**< the request's user pointer */
    const char *text;           /**< TEXT: UTF-8, never split inside a
                                   character; valid until the next fx_poll;
                                   not NUL-terminated */
    size_t text_len;            /**< TEXT: bytes of text */
    fx_finish_reason finish;    /**< DONE: why the row ended */
    fx_status status;           /**< DONE with FX_FINISH_ERROR: why */
    int32_t stop_index;         /**< DONE with FX_FINISH_STOP: which string;
                                   FX_FINISH_EOS: the token; else -1 */
    fx_usage usage;             /**< DONE: the row's accounting */
    const int32_t *tokens;      /**< DONE: the generated token ids (a stop
                                   token included); valid until the next
                                   fx_poll; never NULL */
    size_t n_tokens;            /**< DONE: how many ids */
    /** TOKEN: the token, its log-probability under the model's own
     * distribution (softmax of the logits, before grammar and samplers),
     * and the n_top most likely tokens, most likely first; `top` is valid
     * until the next fx_poll. (Added after the first layout; ferrox is
     * unreleased, so fx_event grew in place.) */
    int32_t token;
    float logprob;              /**< TOKEN: natural log of its probability */
    const fx_token_logprob *top; /**< TOKEN: the alternatives */
    size_t n_top;               /**< TOKEN: how many alternatives */
    /** TEXT and DONE of a row with a lazy grammar (fx_request.
     * grammar_triggers): the byte offset in the row's output where its
     * trigger starts, from the first TEXT that reaches it on; -1 before
     * that, and for every other row. The output counts the generated
     * tokens' text back to back, which is the TEXT events' text whenever
     * that is valid UTF-8. (Filled by fx_poll_sized only.) */
    int64_t grammar_start;
} fx_event;

/**
 * Takes the next event: returns 1 and fills *event, or 0 when there is
 * none. A row's events come in order, its DONE exactly once and last;
 * after its DONE is polled the row's handle is stale. Events of released
 * rows are skipped. fx_poll allocates nothing.
 *
 * fx_event has no struct_size: the caller passes its size instead, as
 * with the fx_*_init_sized functions. Only `event_size` bytes are
 * written: the members that lie wholly inside it, zero for the rest of
 * it, so a host built against an older, smaller fx_event is never
 * written past its end and one built against a newer header gets zero in
 * the members this library does not know. Call it as
 * `fx_poll_sized(b, &ev, sizeof ev, &st)`.
 *
 * A 0 means one of three things, which *status tells apart:
 * - FX_OK: no event is queued (step, or wait for the rows to run);
 * - FX_ERR_REENTRANT: called from inside one of the batcher's callbacks
 *   (the events stay queued for a later call), or such a callback freed
 *   the batcher during this call;
 * - FX_ERR_INVALID_ARG: a NULL batcher or event, or an event_size below
 *   the first layout (fx_batcher_errmsg says which, batcher permitting).
 *
 * @param batcher The batcher.
 * @param[out] event Filled when 1 is returned; left alone otherwise.
 * @param event_size Bytes at event: the caller's sizeof(fx_event).
 * @param[out] status Why 0 was returned, FX_OK with a 1; may be NULL.
 * @return 1 or 0.
 */
FX_API int fx_poll_sized(fx_batcher *batcher, fx_event *event,
                         size_t event_size, fx_status *status);

/**
 * fx_poll_sized for the first layout of fx_event (the one this header
 * has as of 1.0): members added to fx_event later are only filled by
 * fx_poll_sized. Returns 0 for each of the cases fx_poll_sized tells
 * apart.
 *
 * @param batcher The batcher.
 * @param[out] event Filled when 1 is returned.
 * @return 1 or 0.
 */
FX_API int fx_poll(fx_batcher *batcher, fx_event *event);

/**
 * Asks a row to end; it leaves through the usual path at the next step,
 * with DONE reason FX_FINISH_CANCELLED (unless it finished first, or its
 * last text could not be queued: FX_FINISH_ERROR, fx_step). Safe
 * from any thread, including while another thread is inside fx_step.
 * Cancelling twice is fine. Errors: FX_ERR_STALE_HANDLE.
 *
 * Not from inside the batcher's allocator hooks (they may run while the
 * lock this call takes is held), and never overlapping fx_batcher_free.
 * Records no message.
 *
 * @param batcher The batcher.
 * @param row The row.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL batcher); FX_ERR_STALE_HANDLE.
 */
FX_API fx_status fx_cancel(fx_batcher *batcher, fx_row *row);

/**
 * The host is done with a row: it is cancelled if still running, no more
 * events are delivered for it, and the handle is stale at once.
 * Errors: FX_ERR_STALE_HANDLE (including a second release).
 *
 * A row whose DONE was polled is already gone; releasing it is
 * FX_ERR_STALE_HANDLE too.
 *
 * @param batcher The batcher.
 * @param row The row.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL batcher); FX_ERR_STALE_HANDLE;
 *         FX_ERR_REENTRANT.
 */
FX_API fx_status fx_row_release(fx_batcher *batcher, fx_row *row);

/**
 * Pins a prefix -- say, a system prompt many rows share -- in the KV
 * cache: it is computed once (by the following steps) and never evicted
 * until released. Requests naming the lease continue it. Text is tokenized
 * with BOS as the vocabulary says; flags are FX_REQUEST_PARSE_SPECIAL
 * (for text rendered by a chat template) and FX_REQUEST_NO_BOS. Errors as
 * fx_submit.
 *
 * The prefix is computed by an internal row: it takes one of max_rows
 * while it runs and counts in fx_batcher_pending. Once pinned, its blocks
 * count against kv_bytes until fx_lease_release: they are never evicted,
 * so every pinned lease shrinks the cache the rows share. A request that
 * fits the whole cache but not what the pinned leases (and the running
 * rows) leave free is not refused: it waits in the queue, and since
 * admission keeps submit order, so does everything submitted after it,
 * until rows end or a lease is released and frees enough blocks. Keep the
 * pinned prefixes well below kv_bytes, or release leases that are no
 * longer needed. If the blocks cannot be pinned
 * (FX_BATCHER_NO_PREFIX_CACHE, or no room) the lease still works: rows
 * continuing it compute its tokens themselves.
 *
 * @param batcher The batcher.
 * @param text The prefix; copied (tokenized) during the call.
 * @param text_len Bytes of text.
 * @param flags FX_REQUEST_PARSE_SPECIAL and/or FX_REQUEST_NO_BOS.
 * @param[out] out_lease The lease, or NULL on failure.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL out_lease, text NULL with
 *         text_len > 0, other flags, an empty prefix); FX_ERR_NO_ROOM
 *         (longer than n_ctx - 1 tokens, or more blocks than the cache);
 *         FX_ERR_NOMEM; FX_ERR_REENTRANT.
 */
FX_API fx_status fx_lease_create(fx_batcher *batcher, const char *text,
                                 size_t text_len, uint32_t flags,
                                 fx_lease **out_lease);
/** Where a lease stands (fx_lease_status). */
typedef enum fx_lease_state {
    FX_LEASE_NONE = 0,      /**< set when fx_lease_status fails */
    FX_LEASE_PENDING = 1,   /**< queued, or being computed */
    FX_LEASE_PINNED = 2,    /**< computed and pinned: rows continuing it
                                 adopt its blocks */
    FX_LEASE_UNPINNED = 3   /**< computed, but nothing could be pinned
                                 (FX_BATCHER_NO_PREFIX_CACHE, or no room):
                                 rows continuing it compute its tokens */
} fx_lease_state;

/**
 * Where a lease stands, in one call that also tells a stale handle apart
 * (fx_lease_ready and fx_lease_pinned give 0 for one, as for a lease
 * still being computed).
 *
 * @param batcher The batcher.
 * @param lease The lease.
 * @param[out] state Its state; FX_LEASE_NONE on failure.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL batcher or state);
 *         FX_ERR_STALE_HANDLE (released, or issued by another batcher).
 */
FX_API fx_status fx_lease_status(const fx_batcher *batcher,
                                 const fx_lease *lease,
                                 fx_lease_state *state);

/**
 * 1 once the prefix is computed and pinned, 0 while queued or running.
 *
 * Also 1 when the computation ended without a pin (see fx_lease_create;
 * fx_lease_pinned tells the two apart); 0 for a NULL batcher or a stale
 * lease (fx_lease_status tells all of these apart).
 *
 * @param batcher The batcher.
 * @param lease The lease.
 * @return 1 or 0.
 */
FX_API int fx_lease_ready(const fx_batcher *batcher, const fx_lease *lease);
/**
 * 1 while the lease's blocks are pinned in the KV cache: it is ready and
 * rows continuing it adopt the prefix instead of computing it. 0 while it
 * is queued or running, when it ended without a pin
 * (FX_BATCHER_NO_PREFIX_CACHE, or no room: a host may then release other
 * leases or raise kv_bytes), for a NULL batcher or a stale lease.
 *
 * @param batcher The batcher.
 * @param lease The lease.
 * @return 1 or 0.
 */
FX_API int fx_lease_pinned(const fx_batcher *batcher, const fx_lease *lease);
/**
 * Unpins; rows already using it are unaffected. Errors:
 * FX_ERR_STALE_HANDLE.
 *
 * A lease still being computed stops being computed; queued rows that
 * named it still run, computing its tokens themselves.
 *
 * @param batcher The batcher.
 * @param lease The lease.
 * @return FX_OK; FX_ERR_INVALID_ARG (NULL batcher); FX_ERR_STALE_HANDLE;
 *         FX_ERR_REENTRANT.
 */
FX_API fx_status fx_lease_release(fx_batcher *batcher, fx_lease *lease);

/** @} */

/* ---- end batcher ---- */

#ifdef __cplusplus
}
#endif

#endif /* FERROX_H */
