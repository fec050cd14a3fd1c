package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"unsafe"
)

// BatcherOptions are NewBatcher's options; a zero field keeps the
// library's default (fx_batcher_params_init), and nil keeps them all.
type BatcherOptions struct {
	MaxRows       uint32 // rows admitted at once
	MaxStepTokens uint32 // tokens one Step may run through the model
	NCtx          uint32 // most positions one row may use
	BlockTokens   uint32 // KV block size in positions
	KVBytes       uint64 // memory for the KV cache
	Threads       uint32 // the batcher starts Threads-1 worker threads
	NoPrefixCache bool   // never adopt or publish prefixes
	Fast          bool   // OpenBLAS for large matmuls; not batch-invariant
	KVF16         bool   // keys and values stored as f16: half the KV memory
}

// Batcher runs many rows over one model (fx_batcher). It is safe for
// concurrent use: every C call is serialized by a mutex (the library
// requires one thread at a time), except fx_cancel, which Row.Cancel and
// context cancellation call from any goroutine, even during a Step.
type Batcher struct {
	mu     sync.Mutex   // held for every C call but fx_cancel
	freeMu sync.RWMutex // fx_cancel (read) against fx_batcher_free (write)
	h      *C.fx_batcher
	ev     *C.fx_event // C memory, see the preamble
	model  *Model
	rows   map[uintptr]*rowState // by the request's user id
	nextID uintptr

	// Rows and leases whose Go values were collected without Close: the
	// finalizer (on its own goroutine) queues them and the next Step
	// releases them under mu.
	orphanMu     sync.Mutex
	orphanRows   []*rowState
	orphanLeases []uintptr
}

// rowState is the batcher's side of a row. Kept apart from Row so that the
// batcher never keeps a Row reachable and Row's finalizer can run.
type rowState struct {
	id, handle uintptr
	events     []Event
	ended      bool          // DONE polled or released; guarded by mu
	endedCh    chan struct{} // closed when ended, for context watchers
	ctx        context.Context
}

// NewBatcher creates a batcher over a loaded (not vocabulary-only) model.
func NewBatcher(m *Model, opts *BatcherOptions) (*Batcher, error) {
	var p C.fx_batcher_params
	C.fx_batcher_params_init(&p)
	if opts != nil {
		set32 := func(dst *C.uint32_t, v uint32) {
			if v != 0 {
				*dst = C.uint32_t(v)
			}
		}
		set32(&p.max_rows, opts.MaxRows)
		set32(&p.max_step_tokens, opts.MaxStepTokens)
		set32(&p.n_ctx, opts.NCtx)
		set32(&p.block_tokens, opts.BlockTokens)
		set32(&p.n_threads, opts.Threads)
		if opts.KVBytes != 0 {
			p.kv_bytes = C.uint64_t(opts.KVBytes)
		}
		if opts.NoPrefixCache {
			p.flags |= C.FX_BATCHER_NO_PREFIX_CACHE
		}
		if opts.Fast {
			p.flags |= C.FX_BATCHER_FAST
		}
		if opts.KVF16 {
			p.flags |= C.FX_BATCHER_KV_F16
		}
	}
	var h *C.fx_batcher
	var errbuf [1024]C.char
	// Under the model's lock: creating and freeing batchers updates a
	// plain counter inside the C model.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errClosed
	}
	st := Status(C.fx_batcher_create(m.h, &p, &h, &errbuf[0], C.size_t(len(errbuf))))
	if st == StatusOK {
		m.batchers++
	}
	m.mu.Unlock()
	if st != StatusOK {
		return nil, &Error{Op: "fx_batcher_create", Status: st, Message: C.GoString(&errbuf[0])}
	}
	b := &Batcher{
		h:     h,
		ev:    (*C.fx_event)(C.calloc(1, C.sizeof_fx_event)),
		model: m,
		rows:  map[uintptr]*rowState{},
	}
	runtime.SetFinalizer(b, (*Batcher).Close)
	return b, nil
}

// Close ends every row without events and frees the batcher. Closing
// twice is a no-op.
func (b *Batcher) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == nil {
		return nil
	}
	b.freeMu.Lock()
	m := b.model
	m.mu.Lock()
	C.fx_batcher_free(b.h)
	b.h = nil
	m.batchers--
	m.maybeFree()
	m.mu.Unlock()
	b.freeMu.Unlock()
	C.free(unsafe.Pointer(b.ev))
	b.ev = nil
	for _, st := range b.rows {
		b.end(st)
	}
	runtime.SetFinalizer(b, nil)
	return nil
}

func (b *Batcher) fail(op string, st Status) error {
	return &Error{Op: op, Status: st, Message: C.GoString(C.fx_batcher_errmsg(b.h))}
}

// end marks a row ended; mu is held.
func (b *Batcher) end(st *rowState) {
	if !st.ended {
		st.ended = true
		close(st.endedCh)
		delete(b.rows, st.id)
	}
}

// Pending is the number of rows queued or running.
func (b *Batcher) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == nil {
		return 0
	}
	return int(C.fx_batcher_pending(b.h))
}
