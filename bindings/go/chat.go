// Chat templates, with and without a model.

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
	return sizedText("fx_chat_apply_template", func(buf *C.char, cap C.size_t, needed *C.size_t, errbuf *C.char, errcap C.size_t) C.fx_status {
		return C.fx_chat_apply_template(ct, arr, n, C.uint32_t(flags), buf, cap, needed, errbuf, errcap)
	})
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
