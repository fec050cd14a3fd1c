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
	"strings"
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
