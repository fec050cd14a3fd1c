// Package ferrox runs Llama-family GGUF models on the CPU through the
// ferrox C library (include/ferrox.h), with a batcher that serves many
// requests ("rows") at once from the caller's own loop.
//
//	model, err := ferrox.LoadModel("model.gguf", nil)
//	defer model.Close()
//	b, err := ferrox.NewBatcher(model, nil)
//	defer b.Close()
//	req := ferrox.NewRequest("Once upon a time")
//	req.MaxTokens, req.Seed = 32, 42
//	row, err := b.Submit(ctx, &req) // ctx cancelled => the row is cancelled
//	defer row.Close()
//	res, err := row.Wait()          // steps the batcher until the row ends
//
// Explicit Close is the contract for every handle; finalizers only catch
// handles a program forgot, as a safety net.
//
// Building: cgo asks pkg-config for ferrox (the ferrox.pc that
// `cmake --install` puts in <prefix>/lib/pkgconfig), so an installed
// library is found with no flags; set PKG_CONFIG_PATH for another prefix.
//
//	import "github.com/ferrox-ai/ferrox/bindings/go"
package ferrox

/*
#cgo pkg-config: ferrox
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

import (
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// abiMajor is the FX_VERSION_MAJOR this package was written against.
const abiMajor = 0

// Status is the result code of a C call (fx_status). The values are fixed
// forever. Status implements error, so errors.Is(err, ferrox.ErrGrammar)
// matches an *Error carrying that status.
type Status int32

// The status codes of ferrox.h.
const (
	StatusOK          Status = 0
	ErrInvalidArg     Status = 1
	ErrNoMem          Status = 2
	ErrIO             Status = 3
	ErrUnsupported    Status = 4
	ErrTruncated      Status = 5
	ErrBadMagic       Status = 6
	ErrBadVersion     Status = 7
	ErrTooLarge       Status = 8
	ErrBadType        Status = 9
	ErrBadTensor      Status = 10
	ErrBadOffset      Status = 11
	ErrBadAlignment   Status = 12
	ErrDuplicate      Status = 13
	ErrMissing        Status = 14
	ErrBadShape       Status = 15
	ErrBadHparams     Status = 16
	ErrBufferTooSmall Status = 17
	ErrBadVocab       Status = 18
	ErrBadTemplate    Status = 19
	ErrStaleHandle    Status = 20
	ErrReentrant      Status = 21
	ErrNoRoom         Status = 22
	ErrInternal       Status = 23
	ErrGrammar        Status = 24
	ErrAllBanned      Status = 25
)

// String is the library's short description ("truncated file").
func (s Status) String() string { return C.GoString(C.fx_status_str(C.fx_status(s))) }

func (s Status) Error() string { return "ferrox: " + s.String() }

// Error is a failed call: its status and the library's message (the
// errbuf of a load, fx_model_errmsg or fx_batcher_errmsg).
type Error struct {
	Op      string // the C function, e.g. "fx_submit"
	Status  Status
	Message string
}

func (e *Error) Error() string {
	s := "ferrox: " + e.Op + ": " + e.Status.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap lets errors.Is match the Status.
func (e *Error) Unwrap() error { return e.Status }

// Version is the linked library's version string, e.g. "0.1.0".
func Version() string { return C.GoString(C.fx_version_string()) }

// VersionMajor is the linked library's ABI major (FX_VERSION_MAJOR).
func VersionMajor() int { return int(C.fx_version_number()) / 1000000 }

// cmem collects C allocations made for one call and frees them together.
// Anything a C structure points to must be C memory: cgo forbids passing
// Go memory that itself holds Go pointers.
type cmem []unsafe.Pointer

func (m *cmem) str(s string) *C.char {
	p := C.CString(s)
	*m = append(*m, unsafe.Pointer(p))
	return p
}

// bytes returns a C copy of s and its length, so that NUL bytes inside
// s survive (C.CString would end the text there for the library).
func (m *cmem) bytes(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	p := C.CBytes([]byte(s))
	*m = append(*m, p)
	return (*C.char)(p), C.size_t(len(s))
}

// cstr is str for a string the library reads up to its NUL: a NUL inside
// would silently cut it there, so it is an error instead.
func (m *cmem) cstr(op, what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, &Error{Op: op, Status: ErrInvalidArg, Message: what + " contains a NUL byte"}
	}
	return m.str(s), nil
}

func (m *cmem) alloc(n uintptr) unsafe.Pointer {
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		panic("ferrox: out of C memory")
	}
	*m = append(*m, p)
	return p
}

func (m *cmem) int32s(v []int32) *C.int32_t {
	if len(v) == 0 {
		return nil
	}
	p := m.alloc(uintptr(len(v)) * 4)
	copy(unsafe.Slice((*int32)(p), len(v)), v)
	return (*C.int32_t)(p)
}

func (m *cmem) free() {
	for _, p := range *m {
		C.free(p)
	}
	*m = nil
}

// ---------------------------------------------------------------- model --

// ModelOptions are LoadModel's options; nil means the defaults.
type ModelOptions struct {
	// VocabOnly reads metadata and vocabulary only: enough to tokenize,
	// not to create a Batcher.
	VocabOnly bool
	// MappedWeights computes from the file mapping, copying nothing
	// (FX_MODEL_MAPPED_WEIGHTS): pages shared between processes, slower
	// decode.
	MappedWeights bool
}

// Model is a loaded GGUF model (fx_model). Its methods are safe for
// concurrent use: tokenizer and chat calls are serialized on the model so
// that the message read after a failure is that failure's
// (fx_model_errmsg is one per model, not per call).
type Model struct {
	mu       sync.Mutex
	h        *C.fx_model
	batchers int  // open Batchers; the model is freed after the last
	closed   bool // Close was called
}

// LoadModel opens, maps and validates a GGUF file.
func LoadModel(path string, opts *ModelOptions) (*Model, error) {
	if VersionMajor() != abiMajor {
		return nil, &Error{Op: "fx_version_number", Status: ErrUnsupported,
			Message: "library version " + Version() + " has another ABI major"}
	}
	var p C.fx_model_params
	C.fx_model_params_init(&p)
	if opts != nil && opts.VocabOnly {
		p.flags |= C.FX_MODEL_VOCAB_ONLY
	}
	if opts != nil && opts.MappedWeights {
		p.flags |= C.FX_MODEL_MAPPED_WEIGHTS
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [1024]C.char
	var h *C.fx_model
	st := Status(C.fx_model_load(cpath, &p, &h, &errbuf[0], C.size_t(len(errbuf))))
	if st != StatusOK {
		return nil, &Error{Op: "fx_model_load", Status: st, Message: C.GoString(&errbuf[0])}
	}
	m := &Model{h: h}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// Close releases the model. With Batchers still open on it, the memory
// is freed when the last of them closes. Closing twice is a no-op.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.maybeFree()
	return nil
}

// maybeFree frees the handle once the model is closed and unused. The
// count lives here rather than in the C library (where fx_model_free on a
// model in use only marks it) because that mark is not atomic against a
// batcher being freed on another goroutine.
func (m *Model) maybeFree() {
	if m.closed && m.batchers == 0 && m.h != nil {
		C.fx_model_free(m.h)
		m.h = nil
		runtime.SetFinalizer(m, nil)
	}
}

var errClosed = &Error{Op: "ferrox", Status: ErrInvalidArg, Message: "the handle is closed"}

// call runs f with the handle under the model's lock; a status other than
// OK or one in ok becomes an *Error with the model's message.
func (m *Model) call(op string, f func(h *C.fx_model) C.fx_status, ok ...Status) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrInvalidArg, errClosed
	}
	st := Status(f(m.h))
	if st == StatusOK {
		return st, nil
	}
	for _, o := range ok {
		if st == o {
			return st, nil
		}
	}
	return st, &Error{Op: op, Status: st, Message: C.GoString(C.fx_model_errmsg(m.h))}
}

// ModelInfo is what the file says about the model (fx_model_info).
type ModelInfo struct {
	Arch, Name                         string
	GGUFVersion                        uint32
	VocabOnly                          bool
	NVocab, NCtxTrain, NEmbd, NLayer   uint32
	NHead, NHeadKV, NFF, NRot          uint32
	RopeFreqBase, RMSNormEps           float32
	NParams, NTensors, NMeta, FileSize uint64
}

// Info returns the model's hyperparameters.
func (m *Model) Info() (ModelInfo, error) {
	var i C.fx_model_info
	C.fx_model_info_init(&i)
	var out ModelInfo
	_, err := m.call("fx_model_get_info", func(h *C.fx_model) C.fx_status {
		st := C.fx_model_get_info(h, &i)
		// The strings live as long as the model: copy them under the lock.
		out = ModelInfo{
			Arch: C.GoString(i.arch), Name: C.GoString(i.name),
			GGUFVersion: uint32(i.gguf_version), VocabOnly: i.vocab_only != 0,
			NVocab: uint32(i.n_vocab), NCtxTrain: uint32(i.n_ctx_train),
			NEmbd: uint32(i.n_embd), NLayer: uint32(i.n_layer),
			NHead: uint32(i.n_head), NHeadKV: uint32(i.n_head_kv),
			NFF: uint32(i.n_ff), NRot: uint32(i.n_rot),
			RopeFreqBase: float32(i.rope_freq_base), RMSNormEps: float32(i.rms_norm_eps),
			NParams: uint64(i.n_params), NTensors: uint64(i.n_tensors),
			NMeta: uint64(i.n_meta), FileSize: uint64(i.file_size),
		}
		return st
	})
	return out, err
}

// MetaEntry is one metadata key and its value as text: numbers in
// decimal, strings quoted with C escapes, arrays summarized
// (fx_model_meta_format).
type MetaEntry struct {
	Key, Value string
}

// Metadata returns the file's metadata, in file order.
func (m *Model) Metadata() ([]MetaEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	n := uint64(C.fx_model_meta_count(m.h))
	out := make([]MetaEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		// Keys live as long as the model; copied anyway.
		e := MetaEntry{Key: C.GoString(C.fx_model_meta_key(m.h, C.uint64_t(i)))}
		buf := make([]byte, 256)
		for {
			var need C.size_t
			st := Status(C.fx_model_meta_format(m.h, C.uint64_t(i),
				(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &need))
			if st == StatusOK {
				e.Value = C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
				break
			}
			if st != ErrBufferTooSmall {
				return nil, &Error{Op: "fx_model_meta_format", Status: st, Message: C.GoString(C.fx_model_errmsg(m.h))}
			}
			buf = make([]byte, need)
		}
		out = append(out, e)
	}
	return out, nil
}

// TensorInfo is one entry of the file's tensor table (fx_tensor_info).
type TensorInfo struct {
	Name     string
	Type     uint32   // the ggml type id stored in the file
	TypeName string   // "f32", "q8_0", ...
	Dims     []uint64 // Dims[0] is the contiguous one
	Offset   uint64   // of the data within the file
	NBytes   uint64
}

// Tensors returns the file's tensor table, in file order.
func (m *Model) Tensors() ([]TensorInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	n := uint64(C.fx_model_tensor_count(m.h))
	out := make([]TensorInfo, 0, n)
	for i := uint64(0); i < n; i++ {
		var t C.fx_tensor_info
		C.fx_tensor_info_init(&t)
		if st := Status(C.fx_model_tensor_get(m.h, C.uint64_t(i), &t)); st != StatusOK {
			return nil, &Error{Op: "fx_model_tensor_get", Status: st, Message: C.GoString(C.fx_model_errmsg(m.h))}
		}
		ti := TensorInfo{
			Name: C.GoString(t.name), Type: uint32(t._type), TypeName: C.GoString(t.type_name),
			Offset: uint64(t.offset), NBytes: uint64(t.n_bytes),
		}
		for d := 0; d < int(t.n_dims) && d < len(t.dims); d++ {
			ti.Dims = append(ti.Dims, uint64(t.dims[d]))
		}
		out = append(out, ti)
	}
	return out, nil
}

// VocabSize is the number of tokens in the vocabulary.
func (m *Model) VocabSize() int {
	var n C.uint32_t
	m.call("fx_model_vocab_size", func(h *C.fx_model) C.fx_status {
		n = C.fx_model_vocab_size(h)
		return C.FX_OK
	})
	return int(n)
}

// SpecialToken identifies a special token (fx_special_token).
type SpecialToken int

// The special tokens of ferrox.h.
const (
	TokenBOS SpecialToken = iota
	TokenEOS
	TokenUNK
	TokenSEP
	TokenPAD
	TokenEOT
	TokenEOM
	TokenMask
)

// SpecialToken returns the id of a special token, and false when the
// vocabulary has none.
func (m *Model) SpecialToken(which SpecialToken) (int32, bool) {
	var t C.int32_t = -1
	m.call("fx_model_special_token", func(h *C.fx_model) C.fx_status {
		t = C.fx_model_special_token(h, C.fx_special_token(which))
		return C.FX_OK
	})
	return int32(t), t >= 0
}

// IsEOG reports whether generation stops at this token (EOS, EOT, EOM).
func (m *Model) IsEOG(token int32) bool {
	var r C.int
	m.call("fx_token_is_eog", func(h *C.fx_model) C.fx_status {
		r = C.fx_token_is_eog(h, C.int32_t(token))
		return C.FX_OK
	})
	return r != 0
}

// TokenType is a token's GGUF type (tokenizer.ggml.token_type).
type TokenType int

// The token types of ferrox.h.
const (
	TokenTypeUndefined   TokenType = C.FX_TOKEN_TYPE_UNDEFINED // also: no such token
	TokenTypeNormal      TokenType = C.FX_TOKEN_TYPE_NORMAL
	TokenTypeUnknown     TokenType = C.FX_TOKEN_TYPE_UNKNOWN
	TokenTypeControl     TokenType = C.FX_TOKEN_TYPE_CONTROL
	TokenTypeUserDefined TokenType = C.FX_TOKEN_TYPE_USER_DEFINED
	TokenTypeUnused      TokenType = C.FX_TOKEN_TYPE_UNUSED
	TokenTypeByte        TokenType = C.FX_TOKEN_TYPE_BYTE
)

// TokenType returns the token's GGUF type; TokenTypeUndefined for an id
// outside the vocabulary.
func (m *Model) TokenType(token int32) TokenType {
	var t C.fx_token_type_t
	m.call("fx_token_type", func(h *C.fx_model) C.fx_status {
		t = C.fx_token_type(h, C.int32_t(token))
		return C.FX_OK
	})
	return TokenType(t)
}

// TokenizeFlags are fx_tokenize's flags.
type TokenizeFlags uint32

const (
	// AddSpecial adds BOS/EOS where the vocabulary asks for them.
	AddSpecial TokenizeFlags = C.FX_TOKENIZE_ADD_SPECIAL
	// ParseSpecial turns special-token text into the special token.
	ParseSpecial TokenizeFlags = C.FX_TOKENIZE_PARSE_SPECIAL
)

// Tokenize turns text into token ids.
func (m *Model) Tokenize(text string, flags TokenizeFlags) ([]int32, error) {
	var mem cmem
	defer mem.free()
	ctext, clen := mem.bytes(text)
	toks := make([]int32, len(text)+4) // rarely more tokens than bytes
	for {
		var n C.size_t
		st, err := m.call("fx_tokenize", func(h *C.fx_model) C.fx_status {
			return C.fx_tokenize(h, ctext, clen, C.uint32_t(flags),
				(*C.int32_t)(unsafe.Pointer(&toks[0])), C.size_t(len(toks)), &n)
		}, ErrBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return toks[:n], nil
		}
		toks = make([]int32, n)
	}
}

// DetokenizeFlags are the flags of TokenToPiece and Detokenize.
type DetokenizeFlags uint32

const (
	// RemoveSpecial drops a leading BOS and trailing EOS the vocabulary adds.
	RemoveSpecial DetokenizeFlags = C.FX_DETOKENIZE_REMOVE_SPECIAL
	// RenderSpecial writes the text of control tokens ("<s>").
	RenderSpecial DetokenizeFlags = C.FX_DETOKENIZE_RENDER_SPECIAL
)

// sized calls a fill-a-buffer C function, once more if the first buffer
// was too small (the call reports the size it needs).
func (m *Model) sized(op string, f func(h *C.fx_model, buf *C.char, cap C.size_t, n *C.size_t) C.fx_status) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		var n C.size_t
		st, err := m.call(op, func(h *C.fx_model) C.fx_status {
			return f(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		}, ErrBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return buf[:n], nil
		}
		buf = make([]byte, n+1)
	}
}

// TokenToPiece returns the bytes one token stands for (possibly part of a
// UTF-8 character). Only RenderSpecial applies.
func (m *Model) TokenToPiece(token int32, flags DetokenizeFlags) ([]byte, error) {
	return m.sized("fx_token_to_piece", func(h *C.fx_model, buf *C.char, cap C.size_t, n *C.size_t) C.fx_status {
		return C.fx_token_to_piece(h, C.int32_t(token), C.uint32_t(flags), buf, cap, n)
	})
}

// Detokenize returns the text of a token sequence.
func (m *Model) Detokenize(tokens []int32, flags DetokenizeFlags) (string, error) {
	var p *C.int32_t
	if len(tokens) > 0 {
		p = (*C.int32_t)(unsafe.Pointer(&tokens[0]))
	}
	b, err := m.sized("fx_detokenize", func(h *C.fx_model, buf *C.char, cap C.size_t, n *C.size_t) C.fx_status {
		return C.fx_detokenize(h, p, C.size_t(len(tokens)), C.uint32_t(flags), buf, cap, n)
	})
	return string(b), err
}

// ----------------------------------------------------------------- chat --

// ChatMessage is one turn of a conversation.
type ChatMessage struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// ChatFlags are fx_chat_apply's flags.
type ChatFlags uint32

const (
	// ChatAddAssistant ends with the assistant turn opener
	// (add_generation_prompt).
	ChatAddAssistant ChatFlags = C.FX_CHAT_ADD_ASSISTANT
	// ChatWithBOS keeps the template's leading BOS text.
	ChatWithBOS ChatFlags = C.FX_CHAT_WITH_BOS
)

func chatMessages(mem *cmem, msgs []ChatMessage) (*C.fx_chat_message, C.size_t) {
	if len(msgs) == 0 {
		return nil, 0
	}
	arr := (*C.fx_chat_message)(mem.alloc(uintptr(len(msgs)) * C.sizeof_fx_chat_message))
	s := unsafe.Slice(arr, len(msgs))
	for i, msg := range msgs {
		s[i].role = mem.str(msg.Role)
		// An explicit length, so that a NUL inside the content is reported
		// (ErrInvalidArg) instead of silently cutting the text; an empty
		// content keeps length 0, which means NUL-terminated.
		s[i].content, s[i].content_len = mem.bytes(msg.Content)
		if s[i].content == nil {
			s[i].content = mem.str("")
		}
	}
	return arr, C.size_t(len(msgs))
}

func optString(mem *cmem, s string) *C.char {
	if s == "" {
		return nil
	}
	return mem.str(s)
}

// ApplyChatTemplate renders a conversation with the model's chat template
// (tmpl "") or with tmpl: a family name such as "chatml", or template
// text.
func (m *Model) ApplyChatTemplate(tmpl string, msgs []ChatMessage, flags ChatFlags) (string, error) {
	var mem cmem
	defer mem.free()
	arr, n := chatMessages(&mem, msgs)
	ct := optString(&mem, tmpl)
	b, err := m.sized("fx_chat_apply", func(h *C.fx_model, buf *C.char, cap C.size_t, needed *C.size_t) C.fx_status {
		return C.fx_chat_apply(h, ct, arr, n, C.uint32_t(flags), buf, cap, needed)
	})
	if err != nil {
		return "", err
	}
	return string(b[:len(b)-1]), nil // needed counts the NUL
}

// ChatFamily names the family of the model's template (tmpl "") or of
// tmpl.
func (m *Model) ChatFamily(tmpl string) (string, error) {
	var mem cmem
	defer mem.free()
	ct := optString(&mem, tmpl)
	var fam *C.char
	_, err := m.call("fx_chat_detect", func(h *C.fx_model) C.fx_status {
		return C.fx_chat_detect(h, ct, &fam)
	})
	if err != nil {
		return "", err
	}
	return C.GoString(fam), nil
}

// ChatStopTokens returns the token ids that end an assistant turn under
// the chat template (tmpl as for ApplyChatTemplate).
func (m *Model) ChatStopTokens(tmpl string) ([]int32, error) {
	var mem cmem
	defer mem.free()
	ct := optString(&mem, tmpl)
	ids := make([]int32, 8)
	for {
		var n C.size_t
		st, err := m.call("fx_model_chat_stop_tokens", func(h *C.fx_model) C.fx_status {
			return C.fx_model_chat_stop_tokens(h, ct, (*C.int32_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &n)
		}, ErrBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return ids[:n], nil
		}
		ids = make([]int32, n)
	}
}

// ApplyChatTemplate renders a conversation without a model: tmpl is a
// family name (see ChatFamilies) or template text.
func ApplyChatTemplate(tmpl string, msgs []ChatMessage, flags ChatFlags) (string, error) {
	var mem cmem
	defer mem.free()
	arr, n := chatMessages(&mem, msgs)
	ct := mem.str(tmpl)
	var errbuf [1024]C.char
	buf := make([]byte, 1024)
	for {
		var needed C.size_t
		st := Status(C.fx_chat_apply_template(ct, arr, n, C.uint32_t(flags),
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed,
			&errbuf[0], C.size_t(len(errbuf))))
		switch st {
		case StatusOK:
			return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
		case ErrBufferTooSmall:
			buf = make([]byte, needed)
		default:
			return "", &Error{Op: "fx_chat_apply_template", Status: st, Message: C.GoString(&errbuf[0])}
		}
	}
}

// DetectChatTemplate names the family of template text (or of a family
// name): "jinja" for text that resembles no family, which is still
// rendered by the interpreter.
func DetectChatTemplate(tmpl string) (string, error) {
	var mem cmem
	defer mem.free()
	ct, err := mem.cstr("fx_chat_detect", "the template", tmpl)
	if err != nil {
		return "", err
	}
	var fam *C.char
	if st := Status(C.fx_chat_detect(nil, ct, &fam)); st != StatusOK {
		// Without a model the library keeps no message.
		return "", &Error{Op: "fx_chat_detect", Status: st}
	}
	return C.GoString(fam), nil // static
}

// ChatFamilies lists the template families ApplyChatTemplate accepts by
// name.
func ChatFamilies() []string {
	n := int(C.fx_chat_family_count())
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, C.GoString(C.fx_chat_family_name(C.size_t(i))))
	}
	return out
}

// ChatStopStrings returns the texts that end an assistant turn in the
// template's family (tmpl: a family name or template text), for a host
// matching stop strings itself.
func ChatStopStrings(tmpl string) ([]string, error) {
	var mem cmem
	defer mem.free()
	ct, err := mem.cstr("fx_chat_stop_strings", "the template", tmpl)
	if err != nil {
		return nil, err
	}
	n := C.size_t(8)
	for {
		out := (**C.char)(mem.alloc(uintptr(n) * unsafe.Sizeof((*C.char)(nil))))
		var got C.size_t
		st := Status(C.fx_chat_stop_strings(ct, out, n, &got))
		switch st {
		case StatusOK:
			res := make([]string, 0, int(got))
			for _, p := range unsafe.Slice(out, int(got)) {
				res = append(res, C.GoString(p)) // static strings
			}
			return res, nil
		case ErrBufferTooSmall:
			n = got
		default:
			return nil, &Error{Op: "fx_chat_stop_strings", Status: st}
		}
	}
}

// ChatTemplateOptions are RenderChatTemplate's options; nil means none.
type ChatTemplateOptions struct {
	Flags ChatFlags
	// Context is a JSON object whose members become template variables
	// ("tools", "enable_thinking", "documents" ...). A "messages" member
	// (objects with any fields: tool_calls, name ...) is the conversation;
	// msgs must then be empty. "" means none.
	Context string
	// Now is strftime_now's clock; the zero Time means the current time.
	Now time.Time
	// BOSToken and EOSToken are the bos_token and eos_token texts; nil
	// means the model's (without a model: the family's usual one, or "").
	BOSToken, EOSToken *string
}

// chatOptions fills an fx_chat_options in C memory from opts.
func chatOptions(mem *cmem, opts *ChatTemplateOptions) (*C.fx_chat_options, error) {
	o := (*C.fx_chat_options)(mem.alloc(C.sizeof_fx_chat_options))
	C.fx_chat_options_init(o)
	if opts == nil {
		return o, nil
	}
	const op = "fx_chat_apply_ex"
	var err error
	o.flags = C.uint32_t(opts.Flags)
	if opts.Context != "" {
		if o.context_json, err = mem.cstr(op, "the context", opts.Context); err != nil {
			return nil, err
		}
	}
	if !opts.Now.IsZero() {
		o.now = C.int64_t(opts.Now.Unix())
	}
	if opts.BOSToken != nil {
		if o.bos_token, err = mem.cstr(op, "the BOS text", *opts.BOSToken); err != nil {
			return nil, err
		}
	}
	if opts.EOSToken != nil {
		if o.eos_token, err = mem.cstr(op, "the EOS text", *opts.EOSToken); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// sizedText calls one of the functions that write NUL-terminated text and
// a failure's message to an errbuf, once more if the first buffer was too
// small (the call reports the size it needs).
func sizedText(op string, f func(buf *C.char, cap C.size_t, needed *C.size_t, errbuf *C.char, errcap C.size_t) C.fx_status) (string, error) {
	var errbuf [1024]C.char
	buf := make([]byte, 1024)
	for {
		var needed C.size_t
		st := Status(f((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed,
			&errbuf[0], C.size_t(len(errbuf))))
		switch st {
		case StatusOK:
			return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
		case ErrBufferTooSmall:
			buf = make([]byte, needed)
		default:
			return "", &Error{Op: op, Status: st, Message: C.GoString(&errbuf[0])}
		}
	}
}

func renderChat(m *Model, tmpl string, msgs []ChatMessage, opts *ChatTemplateOptions) (string, error) {
	var mem cmem
	defer mem.free()
	arr, n := chatMessages(&mem, msgs)
	o, err := chatOptions(&mem, opts)
	if err != nil {
		return "", err
	}
	var ct *C.char
	if tmpl != "" {
		if ct, err = mem.cstr("fx_chat_apply_ex", "the template", tmpl); err != nil {
			return "", err
		}
	}
	var h *C.fx_model
	if m != nil {
		// Under the model's lock, as every call that records a message in
		// it (the message itself comes back through errbuf).
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return "", errClosed
		}
		h = m.h
	}
	return sizedText("fx_chat_apply_ex", func(buf *C.char, cap C.size_t, needed *C.size_t, eb *C.char, ecap C.size_t) C.fx_status {
		return C.fx_chat_apply_ex(h, ct, arr, n, o, buf, cap, needed, eb, ecap)
	})
}

// RenderChatTemplate renders a conversation with template text as
// transformers' apply_chat_template does (fx_chat_apply_ex): extra
// template variables from opts.Context, strftime_now on opts.Now, BOS/EOS
// texts of the caller's choosing. msgs may be empty when opts.Context
// carries "messages".
func RenderChatTemplate(tmpl string, msgs []ChatMessage, opts *ChatTemplateOptions) (string, error) {
	if tmpl == "" {
		return "", &Error{Op: "fx_chat_apply_ex", Status: ErrInvalidArg, Message: "no template"}
	}
	return renderChat(nil, tmpl, msgs, opts)
}

// RenderChatTemplate is the package's RenderChatTemplate with the model's
// template (tmpl "") or tmpl, and the model's BOS/EOS texts unless
// opts sets them.
func (m *Model) RenderChatTemplate(tmpl string, msgs []ChatMessage, opts *ChatTemplateOptions) (string, error) {
	return renderChat(m, tmpl, msgs, opts)
}

// ------------------------------------------------------ structured output --

// JSONSchemaToGrammar converts a JSON Schema (JSON text) to a GBNF grammar
// for Request.Grammar: the output is one JSON value the schema allows. A
// schema outside the supported subset is an *Error with ErrInvalidArg and
// a message naming the keyword and where it is.
func JSONSchemaToGrammar(schema string) (string, error) {
	var mem cmem
	defer mem.free()
	cs, n := mem.bytes(schema)
	if n == 0 {
		// schema_len 0 would mean NUL-terminated; an empty schema is no JSON.
		return "", &Error{Op: "fx_json_schema_to_grammar", Status: ErrInvalidArg, Message: "empty schema"}
	}
	return sizedText("fx_json_schema_to_grammar", func(buf *C.char, cap C.size_t, needed *C.size_t, eb *C.char, ecap C.size_t) C.fx_status {
		return C.fx_json_schema_to_grammar(cs, n, buf, cap, needed, eb, ecap)
	})
}

// Tool is one tool a model may call.
type Tool struct {
	Name string // 1-64 of [A-Za-z0-9_.-]
	// Parameters is the JSON Schema of its arguments (the subset of
	// JSONSchemaToGrammar); "" means any JSON object.
	Parameters string
}

// ToolFormat is how a model family writes a tool call (fx_tool_format).
type ToolFormat int

// The tool-call formats of ferrox.h.
const (
	// ToolFormatHermes: <tool_call>{"name": N, "arguments": {...}}</tool_call>
	// (Qwen 2.5 and 3, Hermes 2 Pro, SmolLM3).
	ToolFormatHermes ToolFormat = C.FX_TOOL_FORMAT_HERMES
	// ToolFormatLlama3: {"name": N, "parameters": {...}} (Llama 3.1-3.3).
	ToolFormatLlama3 ToolFormat = C.FX_TOOL_FORMAT_LLAMA3
	// ToolFormatMistral: [TOOL_CALLS][{"name": N, "arguments": {...}}, ...].
	ToolFormatMistral ToolFormat = C.FX_TOOL_FORMAT_MISTRAL
)

// Trigger is the text the format's tool call starts with ("<tool_call>"):
// the trigger of its lazy grammar. An unknown format is an error.
func (f ToolFormat) Trigger() (string, error) {
	p := C.fx_tool_format_trigger(C.fx_tool_format(f))
	if p == nil {
		return "", &Error{Op: "fx_tool_format_trigger", Status: ErrInvalidArg, Message: "unknown tool format"}
	}
	return C.GoString(p), nil // static
}

// ToolsToGrammar returns the lazy grammar of a call to one of tools in
// format: set it as Request.Grammar with format.Trigger() in
// Request.GrammarTriggers, and the model answers in prose or calls one of
// the tools with arguments its schema allows. Errors (no tools, a bad
// name, a schema outside the subset) are *Error with the library's
// message, which names the tool.
func ToolsToGrammar(tools []Tool, format ToolFormat) (string, error) {
	const op = "fx_tools_to_grammar"
	if len(tools) == 0 {
		return "", &Error{Op: op, Status: ErrInvalidArg, Message: "no tools"}
	}
	var mem cmem
	defer mem.free()
	arr := (*C.fx_tool)(mem.alloc(uintptr(len(tools)) * C.sizeof_fx_tool))
	s := unsafe.Slice(arr, len(tools))
	for i, t := range tools {
		var err error
		if s[i].name, err = mem.cstr(op, "a tool name", t.Name); err != nil {
			return "", err
		}
		if t.Parameters != "" {
			if s[i].parameters, err = mem.cstr(op, "a tool's parameters", t.Parameters); err != nil {
				return "", err
			}
		}
	}
	return sizedText(op, func(buf *C.char, cap C.size_t, needed *C.size_t, eb *C.char, ecap C.size_t) C.fx_status {
		return C.fx_tools_to_grammar(arr, C.size_t(len(tools)), C.fx_tool_format(format), buf, cap, needed, eb, ecap)
	})
}
