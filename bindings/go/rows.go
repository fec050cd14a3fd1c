// Submitting, stepping and routing events to rows; rows and leases.

package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>

// Row and lease handles are generation-counted ids that only look like
// pointers: (generation << 32) | (slot + 1). Go code keeps them as uintptr
// and these shims convert at the C boundary, so that no such value ever
// sits in a pointer-typed Go variable: with a generation of 0xc0 it would
// look like an address in Go's heap arena and the garbage collector would
// abort on it. For the same reason the fx_request and fx_event structures
// (whose user/lease/row fields hold these ids) live in C memory.
static fx_status fxgo_submit(fx_batcher *b, fx_request *r, uintptr_t user,
                             uintptr_t lease, uintptr_t *out) {
    fx_row *row = NULL;
    r->user = (void *)user;
    r->lease = (fx_lease *)lease;
    fx_status st = fx_submit(b, r, &row);
    *out = (uintptr_t)row;
    return st;
}
static fx_status fxgo_cancel(fx_batcher *b, uintptr_t row) {
    return fx_cancel(b, (fx_row *)row);
}
static fx_status fxgo_row_release(fx_batcher *b, uintptr_t row) {
    return fx_row_release(b, (fx_row *)row);
}
static uintptr_t fxgo_event_user(const fx_event *e) {
    return (uintptr_t)e->user;
}
static fx_status fxgo_lease_create(fx_batcher *b, const char *text,
                                   size_t len, uint32_t flags,
                                   uintptr_t *out) {
    fx_lease *l = NULL;
    fx_status st = fx_lease_create(b, text, len, flags, &l);
    *out = (uintptr_t)l;
    return st;
}
static fx_status fxgo_lease_status(const fx_batcher *b, uintptr_t l,
                                   fx_lease_state *state) {
    return fx_lease_status(b, (const fx_lease *)l, state);
}
static int fxgo_lease_ready(const fx_batcher *b, uintptr_t l) {
    return fx_lease_ready(b, (const fx_lease *)l);
}
static int fxgo_lease_pinned(const fx_batcher *b, uintptr_t l) {
    return fx_lease_pinned(b, (const fx_lease *)l);
}
static fx_status fxgo_lease_release(fx_batcher *b, uintptr_t l) {
    return fx_lease_release(b, (fx_lease *)l);
}
*/
import "C"

import (
	"context"
	"io"
	"runtime"
	"unsafe"
)

// Submit queues a request and returns its row at once; it never runs the
// model. When ctx is cancelled or times out, the row is cancelled
// (fx_cancel) and Row.Wait returns ctx.Err(). Errors are *Error, e.g.
// ErrGrammar for a grammar that does not compile (the message has its
// line and column) or ErrNoRoom for a request that can never fit.
func (b *Batcher) Submit(ctx context.Context, req *Request) (*Row, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var mem cmem
	defer mem.free()
	r := (*C.fx_request)(mem.alloc(C.sizeof_fx_request))
	C.fx_request_init(r)
	if req.Prompt != "" {
		r.prompt, r.prompt_len = mem.bytes(req.Prompt)
	} else {
		r.prompt_tokens, r.n_prompt_tokens = mem.int32s(req.PromptTokens), C.size_t(len(req.PromptTokens))
	}
	r.max_tokens = C.uint32_t(req.MaxTokens)
	r.temperature = C.float(req.Temperature)
	r.top_k = C.uint32_t(req.TopK)
	r.top_p = C.float(req.TopP)
	r.min_p = C.float(req.MinP)
	r.typical_p = C.float(req.TypicalP)
	r.seed = C.uint64_t(req.Seed)
	r.repeat_penalty = C.float(req.RepeatPenalty)
	r.presence_penalty = C.float(req.PresencePenalty)
	r.frequency_penalty = C.float(req.FrequencyPenalty)
	r.penalty_last_n = C.uint32_t(req.PenaltyLastN)
	r.n_logprobs = C.uint32_t(req.NLogprobs)
	if n := len(req.Stop); n > 0 {
		arr := (**C.char)(mem.alloc(uintptr(n) * unsafe.Sizeof((*C.char)(nil))))
		for i, s := range req.Stop {
			unsafe.Slice(arr, n)[i] = mem.str(s)
		}
		r.stop, r.n_stop = arr, C.size_t(n)
	}
	r.stop_tokens, r.n_stop_tokens = mem.int32s(req.StopTokens), C.size_t(len(req.StopTokens))
	if n := len(req.LogitBias); n > 0 {
		arr := (*C.fx_logit_bias)(mem.alloc(uintptr(n) * C.sizeof_fx_logit_bias))
		s := unsafe.Slice(arr, n)
		i := 0
		for tok, bias := range req.LogitBias {
			s[i].token, s[i].bias = C.int32_t(tok), C.float(bias)
			i++
		}
		r.logit_bias, r.n_logit_bias = arr, C.size_t(n)
	}
	if req.Grammar != "" {
		r.grammar, r.grammar_len = mem.bytes(req.Grammar)
	}
	if req.GrammarRoot != "" {
		r.grammar_root = mem.str(req.GrammarRoot)
	}
	if n := len(req.GrammarTriggers); n > 0 {
		arr := (**C.char)(mem.alloc(uintptr(n) * unsafe.Sizeof((*C.char)(nil))))
		for i, s := range req.GrammarTriggers {
			// A NUL would silently shorten the trigger the library sees.
			p, err := mem.cstr("fx_submit", "a grammar trigger", s)
			if err != nil {
				return nil, err
			}
			unsafe.Slice(arr, n)[i] = p
		}
		r.grammar_triggers, r.n_grammar_triggers = arr, C.size_t(n)
	}
	r.grammar_trigger_tokens = mem.int32s(req.GrammarTriggerTokens)
	r.n_grammar_trigger_tokens = C.size_t(len(req.GrammarTriggerTokens))
	if req.JSON {
		r.flags |= C.FX_REQUEST_JSON
	}
	if req.IgnoreEOS {
		r.flags |= C.FX_REQUEST_IGNORE_EOS
	}
	if req.ParseSpecial {
		r.flags |= C.FX_REQUEST_PARSE_SPECIAL
	}
	if req.NoBOS {
		r.flags |= C.FX_REQUEST_NO_BOS
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == nil {
		return nil, errClosed
	}
	var lease uintptr
	if req.Lease != nil {
		if req.Lease.b != b || req.Lease.h == 0 {
			return nil, &Error{Op: "fx_submit", Status: ErrInvalidArg,
				Message: "the lease is released or belongs to another batcher"}
		}
		lease = req.Lease.h
	}
	b.nextID++ // from 1: a user id of 0 would be a NULL user pointer
	var handle C.uintptr_t
	st := Status(C.fxgo_submit(b.h, r, C.uintptr_t(b.nextID), C.uintptr_t(lease), &handle))
	runtime.KeepAlive(req.Lease) // its finalizer must not release it mid-call
	if st != StatusOK {
		return nil, b.fail("fx_submit", st)
	}
	rs := &rowState{id: b.nextID, handle: uintptr(handle), endedCh: make(chan struct{}), ctx: ctx}
	b.rows[rs.id] = rs
	if done := ctx.Done(); done != nil {
		// fx_cancel is the one call allowed from any thread, so the
		// watcher may fire while another goroutine is inside Step.
		go func() {
			select {
			case <-done:
				b.cancel(rs)
			case <-rs.endedCh:
			}
		}()
	}
	row := &Row{b: b, st: rs}
	runtime.SetFinalizer(row, func(r *Row) { b.orphanRow(r.st) })
	return row, nil
}

func (b *Batcher) orphanRow(st *rowState) {
	b.orphanMu.Lock()
	b.orphanRows = append(b.orphanRows, st)
	b.orphanMu.Unlock()
}

// releaseOrphans releases rows and leases whose Go values were dropped;
// mu is held.
func (b *Batcher) releaseOrphans() {
	b.orphanMu.Lock()
	rows, leases := b.orphanRows, b.orphanLeases
	b.orphanRows, b.orphanLeases = nil, nil
	b.orphanMu.Unlock()
	for _, st := range rows {
		if !st.ended {
			C.fxgo_row_release(b.h, C.uintptr_t(st.handle))
			b.end(st)
		}
	}
	for _, l := range leases {
		C.fxgo_lease_release(b.h, C.uintptr_t(l))
	}
}

// Step runs one bounded tick (fx_step): admit, prefill, decode. The
// events it produces are routed to their rows. Only batcher-wide failures
// are returned.
func (b *Batcher) Step() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.step()
}

func (b *Batcher) step() error {
	if b.h == nil {
		return errClosed
	}
	b.releaseOrphans()
	st := Status(C.fx_step(b.h))
	pst := b.dispatch() // events from before a failure still reach their rows
	if st != StatusOK {
		return b.fail("fx_step", st)
	}
	if pst != StatusOK {
		return b.fail("fx_poll_sized", pst)
	}
	return nil
}

// Run steps until no row is queued or running, or ctx is done.
func (b *Batcher) Run(ctx context.Context) error {
	for b.Pending() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.Step(); err != nil {
			return err
		}
	}
	return nil
}

// dispatch routes every queued event to its row and returns the status of
// the poll that found none (StatusOK unless polling itself failed). The
// event is polled with this package's sizeof(fx_event), so a newer library
// never writes past it.
func (b *Batcher) dispatch() Status {
	var pst C.fx_status
	for C.fx_poll_sized(b.h, b.ev, C.size_t(C.sizeof_fx_event), &pst) != 0 {
		st := b.rows[uintptr(C.fxgo_event_user(b.ev))]
		if st == nil {
			continue // released after the event was queued
		}
		ev, ok := convertEvent(b.ev)
		if !ok {
			continue // an event type newer than this package
		}
		st.events = append(st.events, ev)
		if ev.Type == EventDone {
			b.end(st)
		}
	}
	return Status(pst)
}

func (b *Batcher) cancel(st *rowState) error {
	b.freeMu.RLock()
	defer b.freeMu.RUnlock()
	if b.h == nil {
		return nil
	}
	select {
	case <-st.endedCh:
		return nil
	default:
	}
	s := Status(C.fxgo_cancel(b.h, C.uintptr_t(st.handle)))
	// ErrStaleHandle: the row ended in a Step that raced this call, which
	// is what cancelling asks for anyway.
	if s == StatusOK || s == ErrStaleHandle {
		return nil
	}
	// No message: fx_batcher_errmsg may only be read on the loop's side.
	return &Error{Op: "fx_cancel", Status: s}
}

// ------------------------------------------------------------------ rows --

// Row is one request in a batcher. Read its events with Next or Wait;
// both step the batcher when the row has nothing waiting, which advances
// every other row too. Close it when done (it is released, and cancelled
// if still running).
type Row struct {
	b  *Batcher
	st *rowState
}

// Next returns the row's next event, stepping the batcher as needed, and
// io.EOF after its EventDone (or once the row was closed).
func (r *Row) Next() (Event, error) {
	defer runtime.KeepAlive(r)
	b, st := r.b, r.st
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if len(st.events) > 0 {
			ev := st.events[0]
			st.events = st.events[1:]
			return ev, nil
		}
		if st.ended {
			return Event{}, io.EOF
		}
		if b.h == nil {
			return Event{}, errClosed
		}
		if st.ctx.Err() != nil {
			// Cancel now rather than wait for the watcher goroutine, so a
			// cancelled context ends the row at this very step.
			b.cancel(st)
		}
		if err := b.step(); err != nil {
			return Event{}, err
		}
		if len(st.events) == 0 && !st.ended && C.fx_batcher_pending(b.h) == 0 {
			// Nothing left to run yet the row never ended: a library bug.
			// An error beats spinning the caller's loop forever.
			return Event{}, &Error{Op: "fx_step", Status: ErrInternal,
				Message: "row has not ended but the batcher has nothing pending"}
		}
	}
}

// Completion is everything a row produced, from Wait.
type Completion struct {
	Text      string
	Finish    FinishReason
	StopIndex int32
	Usage     Usage
	Tokens    []int32
	Logprobs  []Event // the EventToken events, with NLogprobs > 0
	// A lazy grammar's trigger: its byte offset in Text, or -1.
	GrammarStart int64
}

// Wait runs the row to its end and returns what it produced (from the
// events not yet read). A row that failed gives an *Error with its
// status; a row ended by its context gives the partial Completion and
// ctx.Err().
func (r *Row) Wait() (*Completion, error) {
	var c Completion
	var text []byte
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return nil, &Error{Op: "Row.Wait", Status: ErrStaleHandle,
				Message: "the row was closed before it ended"}
		}
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case EventText:
			text = append(text, ev.Text...)
		case EventToken:
			c.Logprobs = append(c.Logprobs, ev)
		case EventDone:
			c.Text, c.Finish, c.StopIndex = string(text), ev.Finish, ev.StopIndex
			c.Usage, c.Tokens, c.GrammarStart = ev.Usage, ev.Tokens, ev.GrammarStart
			if ev.Finish == FinishError {
				return &c, &Error{Op: "row", Status: ev.Status, Message: "the row failed"}
			}
			if ev.Finish == FinishCancelled && r.st.ctx.Err() != nil {
				return &c, r.st.ctx.Err()
			}
			return &c, nil
		}
	}
}

// Cancel asks the row to end: it finishes with FinishCancelled at the next
// step, unless it finished first. Safe from any goroutine at any time;
// cancelling an ended row does nothing.
func (r *Row) Cancel() error {
	defer runtime.KeepAlive(r)
	return r.b.cancel(r.st)
}

// Ended reports whether the row has ended (its EventDone may be unread).
func (r *Row) Ended() bool {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.st.ended
}

// Close releases the row: it is cancelled if running and delivers no more
// events. Closing twice, or after the row ended, does nothing.
func (r *Row) Close() error {
	defer runtime.KeepAlive(r)
	b, st := r.b, r.st
	b.mu.Lock()
	defer b.mu.Unlock()
	runtime.SetFinalizer(r, nil)
	if b.h == nil || st.ended {
		return nil
	}
	st.events = nil
	b.end(st)
	if s := Status(C.fxgo_row_release(b.h, C.uintptr_t(st.handle))); s != StatusOK {
		return b.fail("fx_row_release", s)
	}
	return nil
}

// ---------------------------------------------------------------- leases --

// LeaseOptions are NewLease's options; nil means none.
type LeaseOptions struct {
	ParseSpecial bool // for text rendered by a chat template
	NoBOS        bool
}

// Lease is a prefix pinned in the KV cache (fx_lease), e.g. a system
// prompt many rows share. Requests naming it continue it.
type Lease struct {
	b *Batcher
	h uintptr // 0 once released
}

// NewLease pins text as a prefix; the following steps compute it.
func (b *Batcher) NewLease(text string, opts *LeaseOptions) (*Lease, error) {
	var flags C.uint32_t
	if opts != nil && opts.ParseSpecial {
		flags |= C.FX_REQUEST_PARSE_SPECIAL
	}
	if opts != nil && opts.NoBOS {
		flags |= C.FX_REQUEST_NO_BOS
	}
	var mem cmem
	defer mem.free()
	ct, n := mem.bytes(text)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == nil {
		return nil, errClosed
	}
	var h C.uintptr_t
	if st := Status(C.fxgo_lease_create(b.h, ct, n, flags, &h)); st != StatusOK {
		return nil, b.fail("fx_lease_create", st)
	}
	l := &Lease{b: b, h: uintptr(h)}
	runtime.SetFinalizer(l, func(l *Lease) {
		b.orphanMu.Lock()
		b.orphanLeases = append(b.orphanLeases, l.h)
		b.orphanMu.Unlock()
	})
	return l, nil
}

// LeaseState is where a lease stands (fx_lease_state).
type LeaseState int

// The lease states of ferrox.h.
const (
	LeaseNone     LeaseState = C.FX_LEASE_NONE
	LeasePending  LeaseState = C.FX_LEASE_PENDING  // queued, or being computed
	LeasePinned   LeaseState = C.FX_LEASE_PINNED   // computed and pinned
	LeaseUnpinned LeaseState = C.FX_LEASE_UNPINNED // computed, nothing pinned
)

// State tells where the lease stands; a closed lease is an error
// (ErrStaleHandle), as is one the library no longer knows.
func (l *Lease) State() (LeaseState, error) {
	defer runtime.KeepAlive(l)
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.b.h == nil {
		return LeaseNone, errClosed
	}
	if l.h == 0 {
		return LeaseNone, &Error{Op: "fx_lease_status", Status: ErrStaleHandle, Message: "the lease is closed"}
	}
	var s C.fx_lease_state
	if st := Status(C.fxgo_lease_status(l.b.h, C.uintptr_t(l.h), &s)); st != StatusOK {
		// fx_lease_status records no message; the status says it.
		return LeaseNone, &Error{Op: "fx_lease_status", Status: st}
	}
	return LeaseState(s), nil
}

// Ready reports whether the prefix is computed (pinned or not: Pinned).
func (l *Lease) Ready() bool {
	defer runtime.KeepAlive(l)
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.b.h != nil && l.h != 0 && C.fxgo_lease_ready(l.b.h, C.uintptr_t(l.h)) != 0
}

// Pinned reports whether the prefix's KV blocks are pinned in the cache
// (Ready is also true for a lease that ended without a pin: a prefix
// shorter than one block, no room, or no prefix cache).
func (l *Lease) Pinned() bool {
	defer runtime.KeepAlive(l)
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.b.h != nil && l.h != 0 && C.fxgo_lease_pinned(l.b.h, C.uintptr_t(l.h)) != 0
}

// Close unpins the prefix; rows already using it are unaffected. Closing
// twice is a no-op.
func (l *Lease) Close() error {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	runtime.SetFinalizer(l, nil)
	if l.h == 0 || b.h == nil {
		l.h = 0
		return nil
	}
	h := l.h
	l.h = 0
	if st := Status(C.fxgo_lease_release(b.h, C.uintptr_t(h))); st != StatusOK {
		return b.fail("fx_lease_release", st)
	}
	return nil
}
