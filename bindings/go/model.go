// Models: loading, information and the tokenizer.

package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

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
	// EagerCopy makes the copy of the weights whole when the first
	// Batcher is created (FX_MODEL_EAGER_COPY) instead of a slice in each
	// of a Batcher's first steps: a slower start, every step at full speed.
	EagerCopy bool
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
	if opts != nil && opts.EagerCopy {
		p.flags |= C.FX_MODEL_EAGER_COPY
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
