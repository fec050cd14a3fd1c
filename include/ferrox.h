/*
 * ferrox -- run Llama-family language models (GGUF) on the CPU for many
 * concurrent requests, from the host's own event loop.
 *
 * This is the only installed header. It includes nothing but <stddef.h> and
 * <stdint.h>, declares only opaque handles, and grows by appending: status
 * codes are never renumbered, parameter structs only gain fields at the end
 * (their first field, struct_size, tells the library which version the
 * caller was compiled against), and a function whose signature was wrong is
 * replaced by a new `_v2` function, never changed.
 *
 * Threads: the library never starts a thread unless a call's parameters ask
 * for more than one. Unless a function says otherwise, calls on one handle
 * must not overlap; calls on different handles are independent. Nothing is
 * global: every piece of state hangs off a handle.
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

#define FX_VERSION_MAJOR 0
#define FX_VERSION_MINOR 1
#define FX_VERSION_PATCH 0
/* MAJOR * 1000000 + MINOR * 1000 + PATCH, like SQLITE_VERSION_NUMBER. */
#define FX_VERSION_NUMBER \
    (FX_VERSION_MAJOR * 1000000 + FX_VERSION_MINOR * 1000 + FX_VERSION_PATCH)
#define FX_VERSION_STRING "0.1.0"

/* The version of the library actually linked, to compare against
 * FX_VERSION_NUMBER: a host built against one header and run against an
 * older library can refuse to start instead of misbehaving. */
FX_API uint32_t fx_version_number(void);
FX_API const char *fx_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/* Every fallible call returns one of these. The values are fixed forever;
 * new codes are only appended. Per-row outcomes of generation arrive as
 * events, not as return values. */
typedef enum fx_status {
    FX_OK = 0,
    FX_ERR_INVALID_ARG = 1,      /* NULL where a value is needed, a bad size,
                                    an index out of range, a bad struct_size */
    FX_ERR_NOMEM = 2,            /* the allocator returned NULL */
    FX_ERR_IO = 3,               /* open, stat, mmap or read failed */
    FX_ERR_UNSUPPORTED = 4,      /* valid but not supported: an unknown
                                    architecture, a newer struct_size with
                                    fields set that this library ignores */
    FX_ERR_TRUNCATED = 5,        /* the file ends inside a structure */
    FX_ERR_BAD_MAGIC = 6,        /* not a GGUF file */
    FX_ERR_BAD_VERSION = 7,      /* GGUF version other than 2 or 3 */
    FX_ERR_TOO_LARGE = 8,        /* a count or size overflows or cannot fit
                                    in the file */
    FX_ERR_BAD_TYPE = 9,         /* unknown value type, nested array, or a
                                    key stored with the wrong type */
    FX_ERR_BAD_TENSOR = 10,      /* bad dimensions or tensor type */
    FX_ERR_BAD_OFFSET = 11,      /* tensor data misaligned, overlapping or
                                    outside the file */
    FX_ERR_BAD_ALIGNMENT = 12,   /* general.alignment unusable */
    FX_ERR_DUPLICATE = 13,       /* a key or tensor name appears twice */
    FX_ERR_MISSING = 14,         /* a required key or tensor is absent */
    FX_ERR_BAD_SHAPE = 15,       /* a tensor's shape or type does not fit the
                                    architecture */
    FX_ERR_BAD_HPARAMS = 16,     /* hyperparameters out of range or
                                    inconsistent with each other */
    FX_ERR_BUFFER_TOO_SMALL = 17, /* the caller's buffer is too small; the
                                    size needed is reported */
    FX_ERR_BAD_VOCAB = 18,       /* tokenizer metadata invalid: wrong array
                                    type or length, special id out of range,
                                    malformed byte token, empty vocabulary */
    FX_ERR_BAD_TEMPLATE = 19,    /* a chat template that cannot be
                                    recognized or rendered, or messages it
                                    cannot take */
    FX_ERR_STALE_HANDLE = 20,    /* a row or lease handle that was released,
                                    finished and reaped, or never issued */
    FX_ERR_REENTRANT = 21,       /* a call into a batcher from inside one of
                                    its own callbacks (log, allocator) */
    FX_ERR_NO_ROOM = 22,         /* a request that can never fit: longer than
                                    the context, or more KV blocks than the
                                    whole budget */
    FX_ERR_INTERNAL = 23,        /* an internal consistency check failed; the
                                    batcher stops rather than corrupt rows
                                    (please report it) */
    FX_ERR_GRAMMAR = 24          /* a grammar that does not compile (the
                                    message has its line and column), or a
                                    row whose grammar cannot continue with
                                    any token of the vocabulary */
} fx_status;

/* A short constant English description of a status ("truncated file").
 * Never NULL; unknown values give "unknown status". */
FX_API const char *fx_status_str(fx_status status);

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct fx_model fx_model;     /* loaded weights and vocabulary */
typedef struct fx_batcher fx_batcher; /* rows in flight over one model */
typedef struct fx_row fx_row;         /* one request inside a batcher */
typedef struct fx_lease fx_lease;     /* a pinned prefix in the KV cache */

/* ------------------------------------------------------------------------ */
/* Allocator and log hooks                                                  */
/* ------------------------------------------------------------------------ */

/* Every heap allocation a handle makes goes through its allocator, given at
 * create time. All three functions NULL means the C library's. Either all
 * three are set or none; a partial set is FX_ERR_INVALID_ARG.
 * realloc_fn follows realloc's contract (ptr NULL allocates; on failure the
 * old block is untouched and NULL is returned). free_fn accepts NULL. */
typedef struct fx_allocator {
    void *(*malloc_fn)(void *user, size_t size);
    void *(*realloc_fn)(void *user, void *ptr, size_t size);
    void (*free_fn)(void *user, void *ptr);
    void *user;
} fx_allocator;

typedef enum fx_log_level {
    FX_LOG_ERROR = 0,
    FX_LOG_WARN = 1,
    FX_LOG_INFO = 2,
    FX_LOG_DEBUG = 3
} fx_log_level;

/* The library never prints. Messages at or below the configured level are
 * passed here, on the thread making the call, as one line without a
 * trailing newline. `message` is valid only during the call. */
typedef void (*fx_log_fn)(void *user, fx_log_level level, const char *message);

/* ------------------------------------------------------------------------ */
/* Models                                                                   */
/* ------------------------------------------------------------------------ */

/* Flags for fx_model_params.flags. */
#define FX_MODEL_VOCAB_ONLY 0x1u /* read metadata and vocabulary only: a GGUF
                                    without tensors loads, and the
                                    architecture need not be supported */

typedef struct fx_model_params {
    uint32_t struct_size;   /* sizeof(fx_model_params), set by _init */
    uint32_t flags;         /* FX_MODEL_* */
    fx_allocator allocator; /* default: the C library's */
    fx_log_fn log_fn;       /* default: NULL, no logging */
    void *log_user;
    fx_log_level log_level; /* default: FX_LOG_WARN */
} fx_model_params;

/* Fills *params with the defaults and sets struct_size. */
FX_API void fx_model_params_init(fx_model_params *params);

/* Opens, maps and validates a GGUF file. Every count, size and offset in
 * the file is checked before it is used; a malformed file gives a specific
 * status, never a crash. On success *out_model owns the mapping until
 * fx_model_free. On failure *out_model is NULL and, when errbuf is not
 * NULL, a NUL-terminated message naming the key or tensor and the byte
 * offset is written into errbuf (truncated to errbuf_size).
 * params may be NULL for the defaults. */
FX_API fx_status fx_model_load(const char *path, const fx_model_params *params,
                               fx_model **out_model, char *errbuf,
                               size_t errbuf_size);

/* Releases everything the model holds. NULL is a no-op. */
FX_API void fx_model_free(fx_model *model);

/* The message of the most recent failed call on this model, or "" if none
 * failed. Valid until the next call on the model. If several threads call
 * into one model, rely on the returned status and not on this message. */
FX_API const char *fx_model_errmsg(const fx_model *model);

/* Hyperparameters read from the file. Strings stay valid while the model
 * lives. Fields the file does not set for a vocabulary-only load are 0. */
typedef struct fx_model_info {
    uint32_t struct_size;   /* sizeof(fx_model_info), set by _init */
    const char *arch;       /* general.architecture, e.g. "llama" */
    const char *name;       /* general.name, or "" */
    uint32_t gguf_version;
    uint32_t vocab_only;    /* 1 if loaded with FX_MODEL_VOCAB_ONLY */
    uint32_t n_vocab;
    uint32_t n_ctx_train;   /* context length the model was trained for */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t n_rot;         /* RoPE dimensions per head */
    float rope_freq_base;
    float rms_norm_eps;
    uint64_t n_params;      /* elements over all tensors */
    uint64_t n_tensors;
    uint64_t n_meta;        /* metadata key/value pairs */
    uint64_t file_size;
} fx_model_info;

FX_API void fx_model_info_init(fx_model_info *info);

/* Fills *info (which the caller prepared with fx_model_info_init). */
FX_API fx_status fx_model_get_info(const fx_model *model, fx_model_info *info);

/* Metadata, in file order. Keys are NUL-terminated and live as long as the
 * model. fx_model_meta_format writes the value as text: numbers in decimal,
 * strings quoted with C escapes, arrays summarized as
 * `[string x 32000: "<unk>", "<s>", "</s>", ...]`. If buf is too small the
 * text is truncated, FX_ERR_BUFFER_TOO_SMALL is returned, and *needed (if
 * not NULL) is set to the size including the NUL. */
FX_API uint64_t fx_model_meta_count(const fx_model *model);
FX_API const char *fx_model_meta_key(const fx_model *model, uint64_t index);
FX_API fx_status fx_model_meta_format(const fx_model *model, uint64_t index,
                                      char *buf, size_t buf_size,
                                      size_t *needed);

/* One entry of the tensor table. */
typedef struct fx_tensor_info {
    uint32_t struct_size;   /* sizeof(fx_tensor_info), set by _init */
    const char *name;       /* lives as long as the model */
    uint32_t type;          /* the ggml type id stored in the file */
    const char *type_name;  /* "f32", "q8_0", ... */
    uint32_t n_dims;        /* 1..4 */
    uint64_t dims[4];       /* dims[0] is the contiguous one; unused are 1 */
    uint64_t offset;        /* byte offset of the data within the file */
    uint64_t n_bytes;
} fx_tensor_info;

FX_API void fx_tensor_info_init(fx_tensor_info *info);
FX_API uint64_t fx_model_tensor_count(const fx_model *model);
FX_API fx_status fx_model_tensor_get(const fx_model *model, uint64_t index,
                                     fx_tensor_info *info);

/* ------------------------------------------------------------------------ */
/* Tokenizer (lib/tokenizer, lib/api/api_tokenize.c)                        */
/* ------------------------------------------------------------------------ */

/* A vocabulary is loaded with every model (FX_MODEL_VOCAB_ONLY loads just
 * the vocabulary and is enough to tokenize). Two kinds are supported:
 * SentencePiece (tokenizer.ggml.model "llama") and byte-level BPE ("gpt2",
 * with the pre-tokenizers "default", "gpt-2", "llama-bpe"/"llama3",
 * "qwen2", "smollm" and their aliases). Token ids match llama.cpp's, with
 * one difference: llama.cpp always matches user-defined tokens in the
 * text, ferrox only with FX_TOKENIZE_PARSE_SPECIAL (as control tokens).
 *
 * Loading checks every tokenizer.ggml.* key (array types and lengths,
 * special ids against the vocabulary size, byte tokens spelled <0xHH> and
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
 * byte through their <0xXX> byte tokens, so the text round-trips -- except
 * that, as in llama.cpp, a truncated multi-byte sequence right before a
 * space takes in part of that space's U+2581 mark, which then decodes as
 * U+2581 rather than a space. BPE vocabularies read each byte that does
 * not start a valid UTF-8 sequence (overlong forms, surrogates, code
 * points above U+10FFFF, truncated sequences, stray continuation bytes) as
 * U+FFFD. NUL bytes are ordinary characters. */

/* Flags for fx_tokenize. */
#define FX_TOKENIZE_ADD_SPECIAL 0x1u   /* add BOS / EOS where the vocabulary
                                          asks for them (add_bos_token,
                                          add_eos_token) */
#define FX_TOKENIZE_PARSE_SPECIAL 0x2u /* text equal to a control, unknown or
                                          user-defined token (such as
                                          "<|im_end|>") becomes that token;
                                          without this flag it is ordinary
                                          text */

/* Tokenizes text[0..text_len) (need not be NUL-terminated; text may be NULL
 * when text_len is 0) into tokens[0..max_tokens). *n_tokens is always set
 * to the number of tokens the text needs. If that exceeds max_tokens,
 * FX_ERR_BUFFER_TOO_SMALL is returned and tokens holds the first
 * max_tokens of them; call again with a buffer of *n_tokens (tokens may be
 * NULL when max_tokens is 0, to ask for the count).
 * Errors: FX_ERR_INVALID_ARG (NULL model or n_tokens, unknown flags),
 * FX_ERR_TOO_LARGE (text_len above 2^31 - 1 bytes), FX_ERR_NOMEM. */
FX_API fx_status fx_tokenize(const fx_model *model, const char *text,
                             size_t text_len, uint32_t flags,
                             int32_t *tokens, size_t max_tokens,
                             size_t *n_tokens);

/* Flags for fx_token_to_piece and fx_detokenize. */
#define FX_DETOKENIZE_REMOVE_SPECIAL 0x1u /* drop a leading BOS and a trailing
                                             EOS that the vocabulary adds */
#define FX_DETOKENIZE_RENDER_SPECIAL 0x2u /* write the text of control and
                                             unknown tokens ("<s>"); without
                                             it they produce nothing */

/* The bytes one token stands for: byte tokens give their byte, U+2581 is a
 * space (SentencePiece), the GPT-2 byte map is undone (BPE), user-defined
 * tokens give their text, unused ones nothing. A piece may
 * be a fragment of a UTF-8 character. Writes min(needed, buf_size) bytes,
 * no NUL terminator, and sets *n_bytes to the size needed; returns
 * FX_ERR_BUFFER_TOO_SMALL if buf_size is less (buf may be NULL when
 * buf_size is 0). Only FX_DETOKENIZE_RENDER_SPECIAL applies here.
 * Errors: FX_ERR_INVALID_ARG (NULL model or n_bytes, token out of range,
 * unknown flags). */
FX_API fx_status fx_token_to_piece(const fx_model *model, int32_t token,
                                   uint32_t flags, char *buf,
                                   size_t buf_size, size_t *n_bytes);

/* The text of a whole sequence: the pieces back to back, except that for
 * SentencePiece vocabularies the space fx_tokenize put before the text is
 * removed again (one leading space of the first piece that has text), so
 * fx_detokenize(fx_tokenize(x)) == x for valid UTF-8 x (for SentencePiece,
 * x without U+2581, which it reads as a space). Buffer contract as
 * fx_token_to_piece. Errors: FX_ERR_INVALID_ARG (NULL model or n_bytes,
 * tokens NULL with n_tokens > 0, a token out of range, unknown flags). */
FX_API fx_status fx_detokenize(const fx_model *model, const int32_t *tokens,
                               size_t n_tokens, uint32_t flags, char *buf,
                               size_t buf_size, size_t *n_bytes);

/* Number of tokens in the vocabulary (0 for NULL). */
FX_API uint32_t fx_model_vocab_size(const fx_model *model);

typedef enum fx_special_token {
    FX_TOKEN_BOS = 0,  /* beginning of sequence */
    FX_TOKEN_EOS = 1,  /* end of sequence */
    FX_TOKEN_UNK = 2,  /* unknown */
    FX_TOKEN_SEP = 3,  /* separator */
    FX_TOKEN_PAD = 4,  /* padding */
    FX_TOKEN_EOT = 5,  /* end of turn ("<|eot_id|>", "<|im_end|>", ...) */
    FX_TOKEN_EOM = 6,  /* end of message ("<|eom_id|>") */
    FX_TOKEN_MASK = 7
} fx_special_token;

/* The id of a special token, from tokenizer.ggml.*_token_id or the
 * vocabulary kind's default (EOT/EOM also recognized by their text), or -1
 * when the vocabulary has none (or model is NULL, or `which` is unknown). */
FX_API int32_t fx_model_special_token(const fx_model *model,
                                      fx_special_token which);

/* 1 if generation should stop at this token (EOS, EOT or EOM), else 0. */
FX_API int fx_token_is_eog(const fx_model *model, int32_t token);

/* The token's GGUF type (tokenizer.ggml.token_type): 1 normal, 2 unknown,
 * 3 control, 4 user-defined, 5 unused, 6 byte; 0 when undefined or the
 * token is out of range. */
FX_API int fx_token_type(const fx_model *model, int32_t token);

/* ---- end tokenizer ---- */

/* ------------------------------------------------------------------------ */
/* Chat templates (lib/chat, lib/api/api_chat.c)                            */
/* ------------------------------------------------------------------------ */

/* Instruction-tuned models expect their conversation in their own format,
 * given as a Jinja template in the GGUF key tokenizer.chat_template.
 * ferrox does not run Jinja: it recognizes the template's family from the
 * template text and renders that family in C, byte for byte as the
 * family's published template renders under Hugging Face transformers
 * (apply_chat_template), whitespace and BOS/EOS text included. A template
 * it does not recognize is FX_ERR_BAD_TEMPLATE with a message saying so,
 * never a guess; the host can then name a family itself.
 *
 * Families (fx_chat_family_name lists them):
 *   chatml            <|im_start|>role\n...<|im_end|>\n  (Qwen2/2.5, SmolLM2,
 *                     OpenHermes; a default system prompt the template
 *                     carries, like Qwen2.5's, is rendered as it does)
 *   qwen3             Qwen3: chatml, with an assistant message's <think>
 *                     block dropped before the last user query and kept
 *                     after it, as the Qwen3 template does
 *   phi4              <|im_start|>role<|im_sep|>...<|im_end|>
 *   llama2            Llama-2-chat:
 *                     [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s>
 *   mistral           Mistral-7B-Instruct v0.2 (HF): [INST] U [/INST]A</s>
 *   mistral-v1        mistralai v1: " [INST] U [/INST] A</s>"
 *   mistral-v3        mistralai v3: "[INST] U[/INST] A</s>"
 *   mistral-v3-tekken mistralai v3-tekken (Nemo): "[INST]U[/INST]A</s>"
 *   llama3            Llama 3:
 *                     <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
 *   llama3.1          Llama 3.1/3.2/3.3: llama3 plus the system header with
 *                     "Cutting Knowledge Date: December 2023" and the
 *                     template's fallback date "Today Date: 26 Jul 2024"
 *   phi3              Phi-3/3.5: <|role|>\n...<|end|>\n
 *   zephyr            zephyr, TinyLlama-Chat, stablelm-zephyr:
 *                     <|role|>\n...EOS\n
 *   gemma             <start_of_turn>user|model\n...<end_of_turn>\n
 *   deepseek          deepseek-coder-instruct: ### Instruction: / ### Response:
 *   deepseek3         DeepSeek V3 / R1 and R1 distills: <|User|>, <|Assistant|>
 *                     (written with U+FF5C fullwidth bars)
 *   vicuna, vicuna-orca  USER: ... ASSISTANT: ...</s>
 *
 * FX_CHAT_ADD_ASSISTANT is the template's add_generation_prompt. The
 * Llama 2, Mistral and Phi-4 templates have none: their user turn already
 * ends with the assistant's opening ([/INST], <|im_start|>assistant...),
 * so there the flag changes nothing, as in the reference.
 *
 * Roles are "system", "user" and "assistant". Where a family's template
 * raises an exception (Llama 2, Mistral and Gemma need user/assistant
 * turns to alternate after an optional first system message) the call
 * fails with FX_ERR_BAD_TEMPLATE and that reason. Two deliberate
 * departures, so that a system prompt always reaches the model: Gemma 1/2
 * and the HF Mistral v0.2 template raise on a system message; ferrox
 * writes it at the head of the first user turn followed by a blank line,
 * as Gemma 3's template and Mistral's documentation do.
 *
 * BOS: templates that start with bos_token (Llama 2/3, Mistral, Gemma,
 * DeepSeek) are rendered WITHOUT that first BOS, because the tokenizer
 * adds it when the model asks for BOS (tokenizer.ggml.add_bos_token), as
 * llama.cpp's renderer also does. Tokenize the result with
 * FX_TOKENIZE_ADD_SPECIAL | FX_TOKENIZE_PARSE_SPECIAL and the tokens are
 * the template's, with one BOS. Every other
 * BOS/EOS the template writes inside the conversation (Llama 2's
 * "</s><s>[INST]", Mistral's "</s>") is in the text. A host that
 * tokenizes without adding BOS passes FX_CHAT_WITH_BOS and gets the
 * template's full output. BOS/EOS texts are the model's own tokens; with
 * no model, the family's usual ones ("<s>", "<|begin_of_text|>", ...). */

typedef struct fx_chat_message {
    const char *role;      /* "system", "user" or "assistant" */
    const char *content;   /* UTF-8 text */
    size_t content_len;    /* bytes of content; 0 means NUL-terminated (so
                              { "user", "hi" } works). A NUL within an
                              explicit length is FX_ERR_INVALID_ARG. */
} fx_chat_message;

/* Flags for fx_chat_apply. */
#define FX_CHAT_ADD_ASSISTANT 0x1u /* end with the assistant turn opener
                                      (add_generation_prompt) */
#define FX_CHAT_WITH_BOS 0x2u      /* keep the template's leading BOS text */

/* Renders msgs[0..n_msgs) with a chat template into buf, NUL-terminated.
 *   tmpl NULL: the model's tokenizer.chat_template (FX_ERR_MISSING if it
 *   has none); a family name such as "chatml": that family; anything
 *   else: template text to recognize.
 * model may be NULL when tmpl is given; then BOS/EOS texts are the
 * family's usual ones and no error message is kept (see
 * fx_chat_apply_template). *needed (if not NULL) is set to the size
 * including the NUL; buf may be NULL with buf_size 0 to ask for it. If buf
 * is too small: FX_ERR_BUFFER_TOO_SMALL, *needed set, buf holds "".
 * Errors: FX_ERR_INVALID_ARG (no messages, a NULL or unknown role, a NUL
 * in content), FX_ERR_BAD_TEMPLATE (unrecognized template, or a
 * conversation the template refuses), FX_ERR_MISSING, FX_ERR_NOMEM;
 * the model's fx_model_errmsg says which. */
FX_API fx_status fx_chat_apply(const fx_model *model, const char *tmpl,
                               const fx_chat_message *msgs, size_t n_msgs,
                               uint32_t flags, char *buf, size_t buf_size,
                               size_t *needed);

/* The same without a model: tmpl (a family name or template text) is
 * required, and a failure's message goes to errbuf (truncated to
 * errbuf_size; errbuf may be NULL). */
FX_API fx_status fx_chat_apply_template(const char *tmpl,
                                        const fx_chat_message *msgs,
                                        size_t n_msgs, uint32_t flags,
                                        char *buf, size_t buf_size,
                                        size_t *needed, char *errbuf,
                                        size_t errbuf_size);

/* Which family a template is: tmpl as for fx_chat_apply (model may be
 * NULL when tmpl is given). *family is a static name like "llama3". */
FX_API fx_status fx_chat_detect(const fx_model *model, const char *tmpl,
                                const char **family);

/* The families by index, 0 <= index < fx_chat_family_count(); NULL past
 * the end. Each name is accepted as tmpl. */
FX_API size_t fx_chat_family_count(void);
FX_API const char *fx_chat_family_name(size_t index);

/* The token ids that end an assistant turn for this model under its chat
 * template (tmpl as for fx_chat_apply), to use as default stop tokens:
 * the family's end-of-turn tokens that the vocabulary has (<|im_end|>,
 * <|eot_id|>, <|end|>, <end_of_turn>, ...) and the model's EOS, without
 * duplicates. Writes up to cap ids and sets *n to the number there are;
 * FX_ERR_BUFFER_TOO_SMALL when that is more than cap (ids may be NULL
 * when cap is 0). FX_ERR_MISSING if the model has no vocabulary. */
FX_API fx_status fx_model_chat_stop_tokens(const fx_model *model,
                                           const char *tmpl, int32_t *ids,
                                           size_t cap, size_t *n);

/* The texts that end an assistant turn in the template's family, for a
 * host matching stop strings without a model: static strings, written up
 * to cap into out, *n set to how many there are (FX_ERR_BUFFER_TOO_SMALL
 * when more than cap). */
FX_API fx_status fx_chat_stop_strings(const char *tmpl, const char **out,
                                      size_t cap, size_t *n);

/* ---- end chat ---- */

/* ------------------------------------------------------------------------ */
/* Batcher: submit / step / poll                                            */
/* ------------------------------------------------------------------------ */

/* A batcher runs many requests ("rows") over one model from the host's own
 * loop:
 *
 *     fx_submit(b, &request, &row)   any time; cheap; never runs the model
 *     fx_step(b)                     one bounded tick: admit, prefill, decode
 *     fx_poll(b, &event)             text chunks and finished rows, in order
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
 */

/* Flags for fx_batcher_params.flags. */
#define FX_BATCHER_NO_PREFIX_CACHE 0x1u /* never adopt or publish prefixes */
#define FX_BATCHER_FAST 0x2u /* large F32 matmuls on OpenBLAS: faster
                                prefill, but a row's last bits (and so its
                                tokens) may depend on the batch */

typedef struct fx_batcher_params {
    uint32_t struct_size;       /* sizeof(fx_batcher_params), set by _init */
    uint32_t flags;             /* FX_BATCHER_* */
    uint32_t max_rows;          /* rows admitted at once; default 16 */
    uint32_t max_step_tokens;   /* tokens one fx_step may run through the
                                   model (bounds a step's latency); default
                                   256. Decode tokens go first, in admission
                                   order; prompt chunks fill the rest */
    uint32_t n_ctx;             /* most positions one row may use; default
                                   the model's training context, capped at
                                   4096 */
    uint32_t block_tokens;      /* KV block size in positions; default 16 */
    uint64_t kv_bytes;          /* memory for the KV cache, allocated once
                                   at create; default enough for max_rows
                                   rows of n_ctx positions */
    uint32_t n_threads;         /* default 1 (no threads are created) */
    fx_allocator allocator;     /* default: the C library's */
    fx_log_fn log_fn;           /* default: NULL */
    void *log_user;
    fx_log_level log_level;     /* default FX_LOG_WARN */
} fx_batcher_params;

FX_API void fx_batcher_params_init(fx_batcher_params *params);

/* Creates a batcher over a loaded (not vocabulary-only) model. The model
 * must outlive it; fx_model_free on a model that batchers still use only
 * marks it, and the last fx_batcher_free frees it. Errors as fx_model_load
 * (message in errbuf), plus FX_ERR_INVALID_ARG for unusable parameters. */
FX_API fx_status fx_batcher_create(fx_model *model,
                                   const fx_batcher_params *params,
                                   fx_batcher **out_batcher, char *errbuf,
                                   size_t errbuf_size);

/* Ends every row without events and frees everything. NULL is a no-op. */
FX_API void fx_batcher_free(fx_batcher *batcher);

/* The message of the most recent failed call on this batcher, or "". */
FX_API const char *fx_batcher_errmsg(const fx_batcher *batcher);

/* Flags for fx_request.flags. */
#define FX_REQUEST_IGNORE_EOS 0x1u     /* keep going past end-of-generation
                                          tokens (until max_tokens or a
                                          stop) */
#define FX_REQUEST_PARSE_SPECIAL 0x2u  /* special-token text in a text prompt
                                          becomes the special token */
#define FX_REQUEST_NO_BOS 0x4u         /* do not add BOS to a text prompt even
                                          if the vocabulary asks for it */
#define FX_REQUEST_JSON 0x8u           /* the output is one JSON value (RFC
                                          8259; at most 20 whitespace
                                          characters in a row): a built-in
                                          grammar. Not with `grammar` */

/* A per-token logit bias (fx_request.logit_bias): added to the token's
 * logit before every sampler; -INFINITY bans the token. */
typedef struct fx_logit_bias {
    int32_t token;
    float bias;
} fx_logit_bias;

/* One entry of a token's log-probabilities (fx_event.top). */
typedef struct fx_token_logprob {
    int32_t token;
    float logprob;              /* natural log of the probability */
} fx_token_logprob;

#define FX_MAX_LOGPROBS 20     /* most alternatives fx_request.n_logprobs
                                  may ask for */

typedef struct fx_request {
    uint32_t struct_size;          /* sizeof(fx_request), set by _init */
    uint32_t flags;                /* FX_REQUEST_* */
    /* The prompt: text (tokenized at submit, with BOS as the vocabulary
     * says), or token ids when `prompt` is NULL. Copied at submit. */
    const char *prompt;
    size_t prompt_len;
    const int32_t *prompt_tokens;
    size_t n_prompt_tokens;
    uint32_t max_tokens;           /* tokens to generate at most; default
                                      256 */
    float temperature;             /* <= 0: greedy; default 0 */
    uint32_t top_k;                /* 0: off (default) */
    float top_p;                   /* 1: off (default) */
    float min_p;                   /* 0: off (default) */
    uint64_t seed;                 /* the row's random stream; default 0 */
    /* Stop strings (UTF-8, NUL-terminated): generation ends when the text
     * contains one; it is not emitted. Text that could be the start of a
     * stop string is held back until it is known not to be. Copied. */
    const char *const *stop;
    size_t n_stop;
    /* Extra token ids that end generation (EOS and EOT always do, unless
     * FX_REQUEST_IGNORE_EOS). Copied. */
    const int32_t *stop_tokens;
    size_t n_stop_tokens;
    /* A pinned prefix (fx_lease_create): the prompt continues it. NULL for
     * none. */
    fx_lease *lease;
    void *user;                    /* returned in this row's events */
    /* Fields below were added after the first layout; a request whose
     * struct_size ends before them gets their defaults. */
    /* A GBNF grammar (llama.cpp's dialect) the output must match: each
     * step only tokens that continue it may be sampled, an end-of-
     * generation token only once it is complete (and it is forced when
     * nothing else may follow). Compiled at submit; an error refuses the
     * request with FX_ERR_GRAMMAR and "line L, column C: ..." in
     * fx_batcher_errmsg. If no token can continue it, the row alone ends
     * with FX_FINISH_ERROR / FX_ERR_GRAMMAR. NULL: none. Copied. */
    const char *grammar;
    size_t grammar_len;
    const char *grammar_root;      /* start rule, NUL-terminated; NULL:
                                      "root" */
    /* More samplers, applied in llama.cpp's default order: logit bias,
     * penalties, top-k, typical, top-p, min-p, temperature, draw. */
    float typical_p;               /* locally typical sampling; 1: off
                                      (default) */
    float repeat_penalty;          /* divides positive logits (multiplies
                                      negative ones) of tokens seen in the
                                      last penalty_last_n; 1: off
                                      (default) */
    float presence_penalty;        /* subtracted once from seen tokens; 0:
                                      off (default) */
    float frequency_penalty;       /* subtracted per occurrence; 0: off
                                      (default) */
    uint32_t penalty_last_n;       /* tokens (prompt included) the
                                      penalties look back; default 64 */
    const fx_logit_bias *logit_bias; /* copied; ids must be in range */
    size_t n_logit_bias;
    /* 0 (default): off. 1..FX_MAX_LOGPROBS: each generated token also
     * arrives as an FX_EVENT_TOKEN event with its log-probability and this
     * many most likely alternatives. */
    uint32_t n_logprobs;
} fx_request;

FX_API void fx_request_init(fx_request *request);

/* Queues a request and returns its row handle at once. Tokenizes and
 * checks; never runs the model and never blocks.
 * Errors: FX_ERR_INVALID_ARG (bad fields, empty prompt, token out of
 * range), FX_ERR_NO_ROOM (prompt + max_tokens longer than n_ctx, or more
 * KV blocks than the whole cache: it could never run), FX_ERR_STALE_HANDLE
 * (a released lease), FX_ERR_GRAMMAR (the grammar does not compile),
 * FX_ERR_NOMEM, FX_ERR_REENTRANT. */
FX_API fx_status fx_submit(fx_batcher *batcher, const fx_request *request,
                           fx_row **out_row);

/* One tick: ends cancelled rows, admits queued requests in submit order
 * while rows and KV blocks allow, runs one forward pass that mixes prompt
 * chunks with one decode token of every generating row (at most
 * max_step_tokens tokens), samples, matches stops, and ends finished rows.
 * Returns FX_OK when there was nothing to do as well. Per-row outcomes
 * arrive as events; only batcher-wide failures are returned here. */
FX_API fx_status fx_step(fx_batcher *batcher);

/* Rows queued or running (not yet ended). */
FX_API uint32_t fx_batcher_pending(const fx_batcher *batcher);

typedef enum fx_event_type {
    FX_EVENT_NONE = 0,
    FX_EVENT_TEXT = 1,  /* a chunk of a row's output */
    FX_EVENT_DONE = 2,  /* the row ended; its last event */
    FX_EVENT_TOKEN = 3  /* a generated token with its log-probabilities
                           (requests with n_logprobs > 0 only). It comes
                           before the TEXT event that first carries any
                           of its text (text may be held back for a stop
                           string or a split character). Stop and EOS
                           tokens get one too */
} fx_event_type;

typedef enum fx_finish_reason {
    FX_FINISH_NONE = 0,
    FX_FINISH_EOS = 1,        /* an end-of-generation or stop token */
    FX_FINISH_STOP = 2,       /* a stop string */
    FX_FINISH_LENGTH = 3,     /* max_tokens or the context reached */
    FX_FINISH_CANCELLED = 4,  /* fx_cancel */
    FX_FINISH_ERROR = 5       /* this row failed; see fx_event.status */
} fx_finish_reason;

typedef struct fx_usage {
    uint32_t prompt_tokens;     /* including the lease's */
    uint32_t cached_tokens;     /* of which taken from the prefix cache */
    uint32_t completion_tokens;
    double queue_seconds;       /* submit to admission */
    double ttft_seconds;        /* admission to first generated token */
    double total_seconds;       /* admission to the end */
} fx_usage;

typedef struct fx_event {
    fx_event_type type;
    fx_row *row;
    void *user;                 /* the request's user pointer */
    const char *text;           /* TEXT: UTF-8, never split inside a
                                   character; valid until the next fx_poll */
    size_t text_len;
    fx_finish_reason finish;    /* DONE */
    fx_status status;           /* DONE with FX_FINISH_ERROR: why */
    int32_t stop_index;         /* DONE with FX_FINISH_STOP: which string;
                                   FX_FINISH_EOS: the token; else -1 */
    fx_usage usage;             /* DONE */
    const int32_t *tokens;      /* DONE: the generated token ids (a stop
                                   token included); valid until the next
                                   fx_poll */
    size_t n_tokens;
    /* TOKEN: the token, its log-probability under the model's own
     * distribution (softmax of the logits, before grammar and samplers),
     * and the n_top most likely tokens, most likely first; `top` is valid
     * until the next fx_poll. (Added after the first layout; ferrox is
     * unreleased, so fx_event grew in place.) */
    int32_t token;
    float logprob;
    const fx_token_logprob *top;
    size_t n_top;
} fx_event;

/* Takes the next event: returns 1 and fills *event, or 0 when there is
 * none. A row's events come in order, its DONE exactly once and last;
 * after its DONE is polled the row's handle is stale. */
FX_API int fx_poll(fx_batcher *batcher, fx_event *event);

/* Asks a row to end; it leaves through the usual path at the next step,
 * with DONE reason FX_FINISH_CANCELLED (unless it finished first). Safe
 * from any thread, including while another thread is inside fx_step.
 * Cancelling twice is fine. Errors: FX_ERR_STALE_HANDLE. */
FX_API fx_status fx_cancel(fx_batcher *batcher, fx_row *row);

/* The host is done with a row: it is cancelled if still running, no more
 * events are delivered for it, and the handle is stale at once.
 * Errors: FX_ERR_STALE_HANDLE (including a second release). */
FX_API fx_status fx_row_release(fx_batcher *batcher, fx_row *row);

/* Pins a prefix -- say, a system prompt many rows share -- in the KV
 * cache: it is computed once (by the following steps) and never evicted
 * until released. Requests naming the lease continue it. Text is tokenized
 * with BOS as the vocabulary says; flags are FX_REQUEST_PARSE_SPECIAL
 * (for text rendered by a chat template) and FX_REQUEST_NO_BOS. Errors as
 * fx_submit. */
FX_API fx_status fx_lease_create(fx_batcher *batcher, const char *text,
                                 size_t text_len, uint32_t flags,
                                 fx_lease **out_lease);
/* 1 once the prefix is computed and pinned, 0 while queued or running. */
FX_API int fx_lease_ready(const fx_batcher *batcher, const fx_lease *lease);
/* Unpins; rows already using it are unaffected. Errors:
 * FX_ERR_STALE_HANDLE. */
FX_API fx_status fx_lease_release(fx_batcher *batcher, fx_lease *lease);

/* ---- end batcher ---- */

#ifdef __cplusplus
}
#endif

#endif /* FERROX_H */
