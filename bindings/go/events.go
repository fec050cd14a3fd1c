// What a row produces: events, finish reasons, usage.

package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

import (
	"time"
	"unsafe"
)

// ---------------------------------------------------------------- events --

// EventType is the kind of an Event.
type EventType int

// The event types of ferrox.h.
const (
	EventText  EventType = C.FX_EVENT_TEXT  // a chunk of output
	EventDone  EventType = C.FX_EVENT_DONE  // the row ended; its last event
	EventToken EventType = C.FX_EVENT_TOKEN // a token with logprobs
)

// FinishReason is why a row ended.
type FinishReason int

// The finish reasons of ferrox.h.
const (
	FinishNone      FinishReason = 0
	FinishEOS       FinishReason = 1 // an end-of-generation or stop token
	FinishStop      FinishReason = 2 // a stop string
	FinishLength    FinishReason = 3 // MaxTokens or the context
	FinishCancelled FinishReason = 4
	FinishError     FinishReason = 5 // see Event.Status
)

func (f FinishReason) String() string {
	names := [...]string{"none", "eos", "stop", "length", "cancelled", "error"}
	if f >= 0 && int(f) < len(names) {
		return names[f]
	}
	return "unknown"
}

// Usage is a row's token counts and clocks.
type Usage struct {
	PromptTokens     uint32 // including the lease's
	CachedTokens     uint32 // of which taken from the prefix cache
	CompletionTokens uint32
	Queue            time.Duration // submit to admission
	TTFT             time.Duration // admission to first generated token
	Total            time.Duration // admission to the end
}

// TokenLogprob is one alternative of an EventToken.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Event is one event of a row. Which fields are set depends on Type.
type Event struct {
	Type EventType
	Text string // EventText: never split inside a UTF-8 character

	Token   int32          // EventToken
	Logprob float32        // EventToken: natural log of the probability
	Top     []TokenLogprob // EventToken: most likely first

	Finish    FinishReason // EventDone
	Status    Status       // EventDone with FinishError: why
	StopIndex int32        // EventDone: the stop string (Stop) or token (EOS)
	Usage     Usage        // EventDone
	Tokens    []int32      // EventDone: the generated token ids

	// EventText and EventDone of a row with a lazy grammar: the byte
	// offset in the row's output where the trigger starts, from the first
	// EventText that reaches it on; -1 before that and for other rows.
	GrammarStart int64
}

func seconds(s C.double) time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// convertEvent copies an event out of C memory: its pointers are valid
// only until the next fx_poll.
func convertEvent(e *C.fx_event) (Event, bool) {
	switch e._type {
	case C.FX_EVENT_TEXT:
		return Event{Type: EventText, Text: C.GoStringN(e.text, C.int(e.text_len)),
			GrammarStart: int64(e.grammar_start)}, true
	case C.FX_EVENT_TOKEN:
		ev := Event{Type: EventToken, Token: int32(e.token), Logprob: float32(e.logprob),
			GrammarStart: -1}
		if e.n_top > 0 {
			for _, t := range unsafe.Slice(e.top, int(e.n_top)) {
				ev.Top = append(ev.Top, TokenLogprob{int32(t.token), float32(t.logprob)})
			}
		}
		return ev, true
	case C.FX_EVENT_DONE:
		u := e.usage
		ev := Event{
			Type: EventDone, Finish: FinishReason(e.finish), Status: Status(e.status),
			StopIndex: int32(e.stop_index), GrammarStart: int64(e.grammar_start),
			Usage: Usage{
				PromptTokens: uint32(u.prompt_tokens), CachedTokens: uint32(u.cached_tokens),
				CompletionTokens: uint32(u.completion_tokens),
				Queue:            seconds(u.queue_seconds), TTFT: seconds(u.ttft_seconds),
				Total: seconds(u.total_seconds),
			},
		}
		if e.n_tokens > 0 {
			ev.Tokens = make([]int32, int(e.n_tokens))
			copy(ev.Tokens, unsafe.Slice((*int32)(unsafe.Pointer(e.tokens)), int(e.n_tokens)))
		}
		return ev, true
	}
	return Event{}, false
}
