// Requests: what Batcher.Submit takes.

package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

// Request is one generation request. Start from NewRequest, which fills
// in the library's defaults (fx_request_init): a zero Request would, for
// example, set TopP to 0.
type Request struct {
	Prompt       string  // text, tokenized at submit ...
	PromptTokens []int32 // ... or token ids (used when Prompt is "")

	MaxTokens        uint32
	Temperature      float32 // <= 0: greedy
	TopK             uint32  // 0: off
	TopP             float32 // 1: off
	MinP             float32 // 0: off
	TypicalP         float32 // 1: off
	Seed             uint64  // the row's random stream
	RepeatPenalty    float32 // 1: off
	PresencePenalty  float32
	FrequencyPenalty float32
	PenaltyLastN     uint32
	LogitBias        map[int32]float32 // math.Inf(-1) bans a token

	Stop       []string // generation ends at any of these; not emitted
	StopTokens []int32  // extra token ids that end generation

	Grammar     string // GBNF the output must match ("" none)
	GrammarRoot string // start rule ("" means "root")
	JSON        bool   // the output is one JSON value (not with Grammar)
	NLogprobs   uint32 // 1..20: EventToken events with alternatives

	// A lazy Grammar (or JSON): the row samples freely until its output
	// contains one of GrammarTriggers (or samples one of
	// GrammarTriggerTokens); the grammar, which must start with the
	// trigger, holds it from there (see ToolsToGrammar). Event.GrammarStart
	// says where it took over.
	GrammarTriggers      []string
	GrammarTriggerTokens []int32

	IgnoreEOS    bool
	ParseSpecial bool // special-token text in Prompt becomes the token
	NoBOS        bool
	Lease        *Lease // a pinned prefix the prompt continues
}

// NewRequest returns a request for a text prompt with the library's
// defaults.
func NewRequest(prompt string) Request {
	var r C.fx_request
	C.fx_request_init(&r)
	return Request{
		Prompt:           prompt,
		MaxTokens:        uint32(r.max_tokens),
		Temperature:      float32(r.temperature),
		TopK:             uint32(r.top_k),
		TopP:             float32(r.top_p),
		MinP:             float32(r.min_p),
		TypicalP:         float32(r.typical_p),
		Seed:             uint64(r.seed),
		RepeatPenalty:    float32(r.repeat_penalty),
		PresencePenalty:  float32(r.presence_penalty),
		FrequencyPenalty: float32(r.frequency_penalty),
		PenaltyLastN:     uint32(r.penalty_last_n),
		NLogprobs:        uint32(r.n_logprobs),
	}
}
