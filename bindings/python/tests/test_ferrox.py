"""The Python binding against the real library and a small synthetic model.

Environment (set by the ctests `binding_python*`, tests/bindings.cmake):
  FERROX_LIBRARY          path of libferrox.so
  FERROX_TEST_MODEL       path of a loadable GGUF model (synthetic-model.gguf)
  FERROX_TEST_INSTALLED   optional: the directory `pip install --target`
                          put the package in; it is tested there instead of
                          the source folder
"""

import asyncio
import ctypes
import gc
import json
import os
import re
import sys
import tempfile
import threading
import unittest

INSTALLED = os.environ.get("FERROX_TEST_INSTALLED", "")
sys.path.insert(0, INSTALLED or os.path.join(os.path.dirname(__file__), ".."))

import ferrox  # noqa: E402
from ferrox import _capi  # noqa: E402

MODEL = os.environ.get("FERROX_TEST_MODEL", "")
# tests/data/chat: chat templates and what jinja2 renders for them. The
# ctests pass it (the pip test runs a copy of this folder); the fallback
# is its place in the source tree.
CHAT_DATA = os.environ.get("FERROX_TEST_CHAT_DATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
    "data", "chat")


def chat_data(*parts):
    with open(os.path.join(CHAT_DATA, *parts), encoding="utf-8") as f:
        return f.read()


def setUpModule():
    # A missing model is a broken test setup, not a reason to skip.
    if not os.path.isfile(MODEL):
        raise RuntimeError("FERROX_TEST_MODEL is not a file: %r" % MODEL)


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = ferrox.Model(MODEL)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def batcher(self, **kw):
        kw.setdefault("n_ctx", 256)
        b = ferrox.Batcher(self.model, **kw)
        self.addCleanup(b.close)
        return b


class TestLayout(unittest.TestCase):
    def test_struct_layouts_match_the_library(self):
        # fx_*_init_sized writes defaults only inside the size it is given
        # and stores that size in struct_size. Given ctypes' size, the
        # library's defaults must land on the fields declared here (a
        # layout that drifted from the header reads them at the wrong
        # offsets), and the bytes past it must stay untouched.
        L = _capi.lib()
        checks = (
            (_capi.ModelParams, "model_params", {"log_level": 1}),
            (_capi.ModelInfo, "model_info", {}),
            (_capi.BatcherParams, "batcher_params", {"log_level": 1}),
            (_capi.Request, "request", {"max_tokens": 256, "top_p": 1.0,
                                        "typical_p": 1.0,
                                        "repeat_penalty": 1.0,
                                        "penalty_last_n": 64,
                                        "n_logprobs": 0,
                                        "n_grammar_triggers": 0,
                                        "n_grammar_trigger_tokens": 0}),
            (_capi.ChatOptions, "chat_options", {"flags": 0, "now": 0}),
            (_capi.TensorInfo, "tensor_info", {"n_dims": 0, "n_bytes": 0}),
        )
        for cls, name, defaults in checks:
            size = ctypes.sizeof(cls)
            buf = ctypes.create_string_buffer(b"\xa5" * (size + 64))
            getattr(L, "fx_%s_init_sized" % name)(
                ctypes.cast(buf, ctypes.POINTER(cls)), size)
            self.assertEqual(buf.raw[size:size + 64], b"\xa5" * 64, name)
            obj = cls.from_buffer(buf)
            self.assertEqual(obj.struct_size, size, name)
            for field, value in defaults.items():
                self.assertEqual(getattr(obj, field), value,
                                 "%s.%s" % (name, field))

    def test_event_layout(self):
        # fx_poll_sized refuses a size below fx_event's first layout and
        # accepts that size: the binding's Event up to grammar_start must
        # be exactly it, and grammar_start the one member after it (the
        # library fills it: -1 for a row without a lazy grammar).
        L = _capi.lib()
        first = _capi.Event.grammar_start.offset
        self.assertEqual(ctypes.sizeof(_capi.Event), first + 8)
        with ferrox.Model(MODEL) as m, ferrox.Batcher(m, n_ctx=64) as b:
            ev = _capi.Event()
            st = ctypes.c_int(-1)
            for size in (first, ctypes.sizeof(ev)):
                self.assertEqual(L.fx_poll_sized(b._handle, ctypes.byref(ev),
                                                 size, ctypes.byref(st)), 0)
                self.assertEqual(st.value, ferrox.Status.OK)
            L.fx_poll_sized(b._handle, ctypes.byref(ev), first - 1,
                            ctypes.byref(st))
            self.assertEqual(st.value, ferrox.Status.INVALID_ARG)
            row = b.submit("Hi", max_tokens=2)
            events = list(row)
            self.assertTrue(events)
            for e in events:
                if isinstance(e, (ferrox.Text, ferrox.Done)):
                    self.assertIsNone(e.grammar_start)

    def test_version(self):
        self.assertRegex(ferrox.version(), r"^0\.\d+\.\d+$")

    def test_package_is_typed(self):
        # PEP 561: the marker travels with the package (the pip install
        # test runs this against the installed copy).
        pkg = os.path.dirname(ferrox.__file__)
        if INSTALLED:
            self.assertEqual(os.path.dirname(pkg), os.path.abspath(INSTALLED))
        self.assertTrue(os.path.isfile(os.path.join(pkg, "py.typed")))

    def test_every_library_status_is_a_status(self):
        # A code the library describes but Status lacks would surface as a
        # bare int: the enum was not updated with the header.
        L = _capi.lib()
        for code in range(64):
            known = L.fx_status_str(code) != b"unknown status"
            self.assertEqual(known, code in ferrox.Status._value2member_map_,
                             "status %d: %s" % (code, L.fx_status_str(code)))

    def test_enums_print_as_names(self):
        # Since Python 3.11 an IntEnum's str() and format() are the number.
        self.assertEqual(str(ferrox.Finish.LENGTH), "Finish.LENGTH")
        self.assertEqual("%s" % ferrox.Status.GRAMMAR, "Status.GRAMMAR")
        self.assertEqual("{}".format(ferrox.SpecialToken.EOS),
                         "SpecialToken.EOS")
        self.assertEqual(f"{ferrox.TokenType.BYTE}", "TokenType.BYTE")
        self.assertEqual(ferrox.Finish.LENGTH, 3)  # still an int


class TestArguments(Base):
    """Integers that do not fit their C type raise ValueError before any C
    call (ctypes would wrap them: max_tokens=-1 became 4294967295)."""

    def test_request_integers(self):
        b = self.batcher()
        bad = (dict(max_tokens=-1), dict(max_tokens=2**32),
               dict(top_k=-1), dict(seed=-1), dict(seed=2**64),
               dict(penalty_last_n=-1), dict(n_logprobs=-1),
               dict(stop_tokens=[-1]), dict(stop_tokens=[2**32 + 2]),
               dict(logit_bias={-1: 1.0}), dict(logit_bias={2**32: 1.0}))
        for kw in bad:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaisesRegex(ValueError, "out of range"):
                    b.submit("Once", **kw)
        for prompt in ([1, -1], [1, 2**31]):
            with self.assertRaisesRegex(ValueError, r"prompt=-?\d+ is out"):
                b.submit(prompt, max_tokens=2)
        with self.assertRaisesRegex(ValueError, "max_tokens=-1"):
            b.submit("Once", max_tokens=-1)
        with self.assertRaises(TypeError):
            b.submit("Once", max_tokens=1.5)
        self.assertEqual(b.pending, 0)
        # The largest values pass the check and reach the library, which
        # judges them itself.
        row = b.submit("Once", max_tokens=4, seed=2**64 - 1,
                       top_k=2**32 - 1)
        self.assertEqual(len(row.result().tokens), 4)

    def test_batcher_integers(self):
        for kw in (dict(max_rows=-1), dict(n_ctx=2**32), dict(kv_bytes=-1),
                   dict(n_threads=-1), dict(block_tokens=-16),
                   dict(max_step_tokens=2**40)):
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaisesRegex(ValueError, "out of range"):
                    ferrox.Batcher(self.model, **kw)

    def test_token_arguments(self):
        m = self.model
        for call in (lambda: m.token_type(-1), lambda: m.is_eog(2**32 + 2),
                     lambda: m.token_to_piece(-1),
                     lambda: m.detokenize([1, -5])):
            with self.assertRaisesRegex(ValueError, "out of range"):
                call()
        with self.assertRaises(ValueError):
            m.special_token(99)
        # Past the vocabulary but within int32: the library's answer.
        self.assertEqual(m.token_type(m.vocab_size + 5),
                         ferrox.TokenType.UNDEFINED)
        bos = m.special_token(ferrox.SpecialToken.BOS)
        self.assertIs(m.token_type(bos), ferrox.TokenType.CONTROL)


class TestModel(Base):
    def test_info(self):
        info = self.model.info
        self.assertEqual(info.arch, "llama")
        self.assertEqual(info.n_layer, 4)
        self.assertEqual(info.n_embd, 256)
        self.assertGreater(info.n_vocab, 0)
        self.assertEqual(self.model.vocab_size, info.n_vocab)
        # The last field: a ModelInfo layout that drifted from the header
        # would read it from the wrong offset.
        self.assertEqual(info.file_size, os.path.getsize(MODEL))

    def test_metadata_and_tensors(self):
        info = self.model.info
        meta = self.model.metadata()
        self.assertEqual(len(meta), info.n_meta)
        self.assertEqual(next(iter(meta)), "general.architecture")
        self.assertEqual(meta["general.architecture"], '"llama"')
        self.assertEqual(meta["llama.block_count"], "4")
        # Arrays are summarized: the 32000 tokens of the Llama 2 vocabulary.
        self.assertTrue(meta["tokenizer.ggml.tokens"].startswith(
            '[string x 32000: "<unk>", "<s>", "</s>"'),
            meta["tokenizer.ggml.tokens"])
        tensors = self.model.tensors()
        self.assertEqual(len(tensors), info.n_tensors)
        by_name = {t.name: t for t in tensors}
        self.assertEqual(len(by_name), len(tensors))
        emb = by_name["token_embd.weight"]
        self.assertEqual(emb.dims, (256, info.n_vocab))
        self.assertTrue(emb.type_name)
        self.assertGreater(emb.n_bytes, 0)
        # Data lies inside the file, tensors one after another.
        for t in tensors:
            self.assertLessEqual(t.offset + t.n_bytes, info.file_size)

    def test_tokenize_round_trip(self):
        text = "Hello world, once upon a time"
        toks = self.model.tokenize(text)
        bos = self.model.special_token(ferrox.SpecialToken.BOS)
        self.assertEqual(toks[0], bos)
        self.assertEqual(self.model.tokenize(text, add_special=False),
                         toks[1:])
        self.assertEqual(self.model.detokenize(toks, remove_special=True),
                         text)
        pieces = b"".join(self.model.token_to_piece(t) for t in toks[1:])
        self.assertEqual(pieces.strip(), text.encode())
        eos = self.model.special_token(ferrox.SpecialToken.EOS)
        self.assertTrue(self.model.is_eog(eos))
        self.assertFalse(self.model.is_eog(toks[1]))

    def test_long_text_needs_a_second_buffer(self):
        # More tokens than the first guess, and more bytes than the first
        # detokenize buffer: both retry paths.
        text = " ".join(str(i) for i in range(400))
        toks = self.model.tokenize(text)
        self.assertGreater(len(toks), len(text.encode()) // 4)
        self.assertEqual(self.model.detokenize(toks, remove_special=True),
                         text)

    def test_bad_token_raises_with_status(self):
        with self.assertRaises(ferrox.FerroxError) as cm:
            self.model.detokenize([self.model.vocab_size + 5])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertIn("out of range", cm.exception.message)

    def test_missing_file(self):
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.Model("/nonexistent/ferrox-model.gguf")
        self.assertEqual(cm.exception.status, ferrox.Status.IO)
        self.assertIn("ferrox-model.gguf", cm.exception.message)

    def test_not_a_gguf(self):
        with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
            f.write(b"this is not a model" * 10)
            f.flush()
            with self.assertRaises(ferrox.FerroxError) as cm:
                ferrox.Model(f.name)
        self.assertEqual(cm.exception.status, ferrox.Status.BAD_MAGIC)

    def test_vocab_only(self):
        with ferrox.Model(MODEL, vocab_only=True) as m:
            self.assertTrue(m.info.vocab_only)
            self.assertEqual(m.tokenize("Hello"), self.model.tokenize("Hello"))
            with self.assertRaises(ferrox.FerroxError):
                ferrox.Batcher(m)

    def test_mapped_weights(self):
        # The same tokens computed from the mapping as from the copy.
        texts = []
        for mapped in (False, True):
            with ferrox.Model(MODEL, mapped_weights=mapped) as m:
                b = ferrox.Batcher(m, n_ctx=128)
                texts.append(b.submit("Once upon", max_tokens=12,
                                      temperature=0.9,
                                      seed=7).result().text)
                b.close()
        self.assertTrue(texts[0])
        self.assertEqual(texts[0], texts[1])

    def test_close_twice_and_use_after_close(self):
        m = ferrox.Model(MODEL)
        m.close()
        m.close()
        with self.assertRaises(ValueError):
            m.tokenize("x")

    def test_model_closed_before_its_batcher(self):
        m = ferrox.Model(MODEL)
        b = ferrox.Batcher(m, n_ctx=128)
        m.close()  # deferred: the batcher still needs the weights
        text = b.submit("Hi", max_tokens=4).result().text
        self.assertTrue(text)
        b.close()
        self.assertIsNone(m._handle)


class TestChat(Base):
    MSGS = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}]

    def test_template_without_model(self):
        out = ferrox.apply_chat_template("chatml", self.MSGS,
                                         add_assistant=True)
        self.assertEqual(out, "<|im_start|>system\nBe brief.<|im_end|>\n"
                              "<|im_start|>user\nHi<|im_end|>\n"
                              "<|im_start|>assistant\n")
        self.assertIn("llama3", ferrox.chat_families())
        self.assertEqual(ferrox.detect_chat_template("chatml"), "chatml")

    def test_template_with_model(self):
        out = self.model.apply_chat_template([("user", "Hi")],
                                             template="llama2")
        self.assertEqual(out, "[INST] Hi [/INST]")
        self.assertEqual(self.model.chat_family("zephyr"), "zephyr")
        eos = self.model.special_token(ferrox.SpecialToken.EOS)
        self.assertIn(eos, self.model.chat_stop_tokens("chatml"))

    def test_long_conversation_grows_the_buffer(self):
        msgs = [("user" if i % 2 == 0 else "assistant", "word " * 50)
                for i in range(9)]
        out = ferrox.apply_chat_template("chatml", msgs)
        self.assertGreater(len(out), 2000)

    def test_render_chat_template(self):
        # Template text with extra variables and messages carrying any
        # fields, rendered as jinja2 would (fx_chat_apply_ex).
        tmpl = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}:"
                "{{ m.content }}{{ m.tool_calls | tojson if m.tool_calls }}]"
                "{% endfor %}{{ 'think' if enable_thinking }}"
                "{{ strftime_now('%Y-%m-%d') }}")
        ctx = {"messages": [{"role": "tool", "content": "r",
                             "tool_calls": [{"a": 1}]}],
               "enable_thinking": True}
        out = ferrox.render_chat_template(tmpl, context=ctx, now=1721952000,
                                          bos_token="<B>", with_bos=True)
        self.assertEqual(out, '<B>[tool:r[{"a": 1}]]think2024-07-26')
        out = ferrox.render_chat_template(tmpl, [("user", "hi")],
                                          context={"enable_thinking": False},
                                          now=1721952000, bos_token="<B>")
        self.assertEqual(out, "[user:hi]2024-07-26")
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.render_chat_template("{{ raise_exception('no') }}",
                                        [("user", "x")])
        self.assertEqual(cm.exception.status, ferrox.Status.BAD_TEMPLATE)
        self.assertIn("no", cm.exception.message)

    def test_errors(self):
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.apply_chat_template("{{ not a template we know }}",
                                       [("user", "x")])
        self.assertEqual(cm.exception.status, ferrox.Status.BAD_TEMPLATE)
        self.assertTrue(cm.exception.message)
        # The synthetic model carries no chat template of its own.
        with self.assertRaises(ferrox.FerroxError) as cm:
            self.model.apply_chat_template([("user", "x")])
        self.assertEqual(cm.exception.status, ferrox.Status.MISSING)
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.apply_chat_template("chatml", [("robot", "x")])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)


class TestChatEx(Base):
    """fx_chat_apply_ex on a published template with tools, byte for byte
    what transformers renders (tests/data/chat)."""
    QWEN = "Qwen-Qwen2.5-7B-Instruct"

    def test_tools_template_without_model(self):
        out = ferrox.render_chat_template(
            chat_data("templates", self.QWEN + ".jinja"),
            context=chat_data("contexts", "tools.json"), add_assistant=True,
            now=1721952000, bos_token="<s>", eos_token="</s>")
        self.assertEqual(out, chat_data("expected", self.QWEN + "--tools.txt"))
        self.assertIn('"name": "get_weather"', out)

    def test_tools_template_with_model(self):
        # A dict context, and the model's own BOS/EOS (<s>, </s>).
        ctx = json.loads(chat_data("contexts", "tools.json"))
        out = self.model.render_chat_template(
            template=chat_data("templates", self.QWEN + ".jinja"),
            context=ctx, add_assistant=True)
        self.assertEqual(out, chat_data("expected", self.QWEN + "--tools.txt"))
        # Messages from the argument, tools from the context.
        out = self.model.render_chat_template(
            [("user", "Weather in Oslo?")],
            template=chat_data("templates", self.QWEN + ".jinja"),
            context={"tools": ctx["tools"]}, add_assistant=True)
        self.assertIn("<tools>\n" + json.dumps(ctx["tools"][0]), out)
        self.assertTrue(out.endswith(
            "Weather in Oslo?<|im_end|>\n<|im_start|>assistant\n"), out)

    def test_errors_carry_the_library_message(self):
        # The synthetic model has no template of its own.
        with self.assertRaises(ferrox.FerroxError) as cm:
            self.model.render_chat_template([("user", "x")])
        self.assertEqual(cm.exception.status, ferrox.Status.MISSING)
        self.assertTrue(cm.exception.message)
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.render_chat_template("{{ messages }}", [("user", "x")],
                                        context="[1, 2]")
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertTrue(cm.exception.message)
        with self.assertRaises(ValueError):
            ferrox.render_chat_template("{{ x }}", [("user", "x")],
                                        context='{"x": 1}\0')
        # Messages twice: in the argument and in the context.
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.render_chat_template(
                "{{ messages }}", [("user", "x")],
                context={"messages": [{"role": "user", "content": "y"}]})
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)

    def test_chat_stop_strings(self):
        self.assertIn("<|im_end|>", ferrox.chat_stop_strings("chatml"))
        self.assertIn("<|eot_id|>", ferrox.chat_stop_strings("llama3"))
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.chat_stop_strings("{% unclosed")
        self.assertEqual(cm.exception.status, ferrox.Status.BAD_TEMPLATE)


# Two tools for the tool-call tests; both calls are finite (enums and
# bounded integers), so a row that starts one always ends.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object",
                       "properties": {"city": {"enum": ["Paris", "Oslo"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add",
        "parameters": {"type": "object",
                       "properties": {
                           "a": {"type": "integer", "minimum": 0,
                                 "maximum": 99},
                           "b": {"type": "integer", "minimum": 0,
                                 "maximum": 99}},
                       "required": ["a", "b"]}}},
]


def check_hermes_call(testcase, text):
    """text starts with one Hermes tool call of TOOLS with valid
    arguments (the grammar makes the newlines around the object
    optional); returns the call."""
    m = re.match(r"<tool_call>\n?(.*?)\n?</tool_call>", text, re.S)
    testcase.assertIsNotNone(m, repr(text))
    call = json.loads(m.group(1))
    testcase.assertEqual(sorted(call), ["arguments", "name"], call)
    args = call["arguments"]
    if call["name"] == "get_weather":
        testcase.assertEqual(list(args), ["city"])
        testcase.assertIn(args["city"], ("Paris", "Oslo"))
    else:
        testcase.assertEqual(call["name"], "add")
        testcase.assertEqual(list(args), ["a", "b"])
        for v in args.values():
            testcase.assertIsInstance(v, int)
            testcase.assertTrue(0 <= v <= 99, call)
    return call


def steer(model, words):
    """logit_bias and presence_penalty that make the synthetic model (random
    weights) write `words` first, token by token: each token's bias is 100
    below the one before, and the presence penalty pushes a token already
    written below every later one. Returns (bias, presence_penalty)."""
    ids = model.tokenize(words, add_special=False)
    if len(set(ids)) != len(ids):
        raise AssertionError("%r repeats a token: %r" % (words, ids))
    bias = {t: 1000.0 - 100.0 * i for i, t in enumerate(ids)}
    return bias, 100.0 * (len(ids) + 1)


class TestStructuredOutput(Base):
    def test_tool_format_triggers(self):
        self.assertEqual(ferrox.tool_format_trigger(ferrox.ToolFormat.HERMES),
                         "<tool_call>")
        self.assertEqual(ferrox.tool_format_trigger(ferrox.ToolFormat.LLAMA3),
                         '{"name"')
        self.assertEqual(ferrox.tool_format_trigger(2), "[TOOL_CALLS]")
        with self.assertRaises(ValueError):
            ferrox.tool_format_trigger(7)

    def test_json_schema_grammar_holds_a_row(self):
        schema = {"type": "object",
                  "properties": {"n": {"type": "integer", "minimum": 0,
                                       "maximum": 9},
                                 "ok": {"type": "boolean"}},
                  "required": ["n", "ok"]}
        g = ferrox.json_schema_to_grammar(schema)
        self.assertIn("root ::=", g)
        self.assertEqual(ferrox.json_schema_to_grammar(json.dumps(schema)), g)
        b = self.batcher()
        for seed in range(3):
            res = b.submit("Data:", max_tokens=64, temperature=1.0, seed=seed,
                           grammar=g).result()
            self.assertEqual(res.finish, ferrox.Finish.EOS, res.text)
            v = json.loads(res.text)
            self.assertEqual(sorted(v), ["n", "ok"])
            self.assertIn(v["n"], range(10))
            self.assertIsInstance(v["ok"], bool)

    def test_schema_errors_carry_the_library_message(self):
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.json_schema_to_grammar(
                {"type": "object",
                 "properties": {"age": {"type": "integer", "multipleOf": 3}}})
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertIn("multipleOf", cm.exception.message)
        self.assertIn("/properties/age", cm.exception.message)
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.json_schema_to_grammar("{not json")
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertTrue(cm.exception.message)

    def test_tools_grammar_errors(self):
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.tools_to_grammar([("bad name!", None)])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertIn("tool 0's name", cm.exception.message)
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.tools_to_grammar(
                [("ok", {"type": "object", "not": {}})])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertIn("not", cm.exception.message)
        with self.assertRaises(ferrox.FerroxError) as cm:
            ferrox.tools_to_grammar([])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        with self.assertRaises(ValueError):
            ferrox.tools_to_grammar(TOOLS, 9)
        with self.assertRaises(ValueError):
            ferrox.tools_to_grammar([{"parameters": {}}])
        with self.assertRaises(ValueError):
            ferrox.tools_to_grammar([("a\0b", None)])
        # Any iterable of tools.
        self.assertEqual(ferrox.tools_to_grammar(iter(TOOLS)),
                         ferrox.tools_to_grammar(TOOLS))

    def test_lazy_tool_call_grammar(self):
        trigger = ferrox.tool_format_trigger(ferrox.ToolFormat.HERMES)
        g = ferrox.tools_to_grammar(TOOLS, ferrox.ToolFormat.HERMES)
        # The other spellings of a tool give the same grammar.
        plain = [{"name": t["function"]["name"],
                  "parameters": json.dumps(t["function"]["parameters"])}
                 for t in TOOLS]
        self.assertEqual(ferrox.tools_to_grammar(plain), g)
        # The model writes some prose, then the trigger; the grammar must
        # hold everything from there to a complete call.
        bias, presence = steer(self.model, "Sure" + trigger)
        b = self.batcher(n_ctx=1024)
        row = b.submit("Weather?", max_tokens=600, grammar=g,
                       grammar_triggers=[trigger], logit_bias=bias,
                       presence_penalty=presence)
        out, starts, done = b"", [], None
        for ev in row:
            if isinstance(ev, ferrox.Text):
                out += ev.text.encode()
                starts.append(ev.grammar_start)
            elif isinstance(ev, ferrox.Done):
                done = ev
        self.assertEqual(done.finish, ferrox.Finish.EOS, out)
        start = done.grammar_start
        self.assertIsNotNone(start, out)
        self.assertGreater(start, 0, out)  # after the prose
        self.assertTrue(out[:start].decode().strip().startswith("Sure"), out)
        # None until a Text reaches the trigger, then its offset.
        self.assertIsNone(starts[0])
        self.assertEqual(set(starts[starts.index(start):]), {start}, starts)
        self.assertEqual(set(starts[:starts.index(start)]), {None}, starts)
        text = out[start:].decode()
        self.assertTrue(text.startswith(trigger), text)
        while text:  # every call the grammar allowed, back to back
            check_hermes_call(self, text)
            text = text[text.index("</tool_call>") + 12:]
            if text:
                self.assertEqual(text[0], "\n")  # between two calls
                text = text[1:]
        # The same request without the trigger never meets its grammar.
        res = b.submit("Weather?", max_tokens=12, logit_bias=bias,
                       presence_penalty=presence).result()
        self.assertIn(trigger, res.text)
        self.assertIsNone(res.grammar_start)

    def test_trigger_arguments(self):
        b = self.batcher()
        g = 'root ::= "a"'
        with self.assertRaises(TypeError):
            b.submit("x", max_tokens=4, grammar=g, grammar_triggers="a")
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, grammar=g, grammar_triggers=[""])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)
        self.assertTrue(cm.exception.message)
        with self.assertRaises(ValueError):
            b.submit("x", max_tokens=4, grammar=g,
                     grammar_trigger_tokens=[-1])
        with self.assertRaises(ValueError):
            b.submit("x", max_tokens=4, grammar=g, grammar_triggers=["a\0"])
        # A trigger token past the vocabulary is the library's to refuse.
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, grammar=g,
                     grammar_trigger_tokens=[self.model.vocab_size])
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)


class TestBatcher(Base):
    def test_rows_are_deterministic_and_independent(self):
        b = self.batcher(max_rows=4)
        prompts = ["Once upon a time", "The dragon said", "Once upon a time"]
        rows = [b.submit(p, max_tokens=12, temperature=0.9, seed=7)
                for p in prompts]
        other = b.submit("Once upon a time", max_tokens=12, temperature=0.9,
                         seed=8)
        self.assertEqual(b.pending, 4)
        b.run()
        self.assertEqual(b.pending, 0)
        results = [r.result() for r in rows]
        for res in results:
            self.assertTrue(res.text)
            self.assertEqual(res.usage.completion_tokens, len(res.tokens))
        # Same request, same seed: same text, although the rows shared
        # the batch with different neighbours.
        self.assertEqual(results[0].text, results[2].text)
        self.assertEqual(results[0].tokens, results[2].tokens)
        self.assertNotEqual(results[0].tokens, results[1].tokens)
        self.assertNotEqual(results[0].tokens, other.result().tokens)
        # Alone in a fresh batcher, the same request gives the same text.
        alone = self.batcher().submit("Once upon a time", max_tokens=12,
                                      temperature=0.9, seed=7).result()
        self.assertEqual(alone.text, results[0].text)

    def test_events_stream_in_order(self):
        b = self.batcher()
        row = b.submit("Once upon a time", max_tokens=8, ignore_eos=True)
        events = list(row)
        self.assertIsInstance(events[-1], ferrox.Done)
        self.assertTrue(all(isinstance(e, ferrox.Text) for e in events[:-1]))
        done = events[-1]
        self.assertEqual(done.finish, ferrox.Finish.LENGTH)
        self.assertEqual(len(done.tokens), 8)
        pieces = b"".join(self.model.token_to_piece(t) for t in done.tokens)
        self.assertEqual("".join(e.text for e in events[:-1]).encode(),
                         pieces)
        self.assertTrue(row.done)
        self.assertEqual(list(row), [])  # nothing after Done

    def test_token_prompt_matches_text_prompt(self):
        b = self.batcher()
        text = b.submit("The dragon said", max_tokens=8).result()
        toks = self.model.tokenize("The dragon said")
        by_ids = b.submit(toks, max_tokens=8).result()
        self.assertEqual(text.tokens, by_ids.tokens)

    def test_stop_string(self):
        b = self.batcher()
        full = b.submit("Once upon a time", max_tokens=16,
                        ignore_eos=True).result().text
        stop = full[len(full) // 2:len(full) // 2 + 3]
        self.assertEqual(len(stop), 3)
        res = b.submit("Once upon a time", max_tokens=16, ignore_eos=True,
                       stop=["\x01never", stop]).result()
        self.assertEqual(res.finish, ferrox.Finish.STOP)
        self.assertEqual(res.stop_index, 1)
        self.assertEqual(res.text, full[:full.index(stop)])

    def test_sampling_parameters_reach_the_library(self):
        b = self.batcher()
        base = b.submit("Once", max_tokens=6, temperature=0.8, seed=3)
        banned = base.result().tokens[0]
        # A -inf bias bans the token the unbiased row started with.
        res = b.submit("Once", max_tokens=6, temperature=0.8, seed=3,
                       logit_bias={banned: float("-inf")}, top_k=40,
                       top_p=0.95, min_p=0.01, typical_p=0.99,
                       repeat_penalty=1.1, presence_penalty=0.1,
                       frequency_penalty=0.1, penalty_last_n=16).result()
        self.assertNotEqual(res.tokens[0], banned)
        self.assertNotIn(banned, res.tokens)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("Once", max_tokens=4, n_logprobs=_capi.MAX_LOGPROBS + 1)
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)

    def test_logprobs(self):
        b = self.batcher()
        res = b.submit("Once", max_tokens=5, n_logprobs=3,
                       ignore_eos=True).result()
        self.assertEqual(len(res.logprobs), 5)
        for tok, ev in zip(res.tokens, res.logprobs):
            self.assertEqual(ev.token, tok)
            self.assertLessEqual(ev.logprob, 0.0)
            self.assertEqual(len(ev.top), 3)
            probs = [p for _, p in ev.top]
            self.assertEqual(probs, sorted(probs, reverse=True))

    def test_grammar(self):
        b = self.batcher()
        for seed in range(3):
            res = b.submit("Answer:", max_tokens=8, temperature=1.0,
                           seed=seed, grammar='root ::= "yes" | "no"').result()
            self.assertIn(res.text, ("yes", "no"))
            self.assertEqual(res.finish, ferrox.Finish.EOS)
        res = b.submit("Answer:", max_tokens=8, grammar_root="answer",
                       grammar='answer ::= "maybe"').result()
        self.assertEqual(res.text, "maybe")

    def test_bad_grammar_raises(self):
        b = self.batcher()
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, grammar='root ::= "unterminated')
        self.assertEqual(cm.exception.status, ferrox.Status.GRAMMAR)
        self.assertIn("line 1", cm.exception.message)
        self.assertEqual(b.pending, 0)

    def test_json_flag(self):
        b = self.batcher()
        res = b.submit("Data:", max_tokens=24, temperature=0.7, seed=11,
                       json=True).result()
        self.assertTrue(res.text)
        self.assertIn(res.text.lstrip()[0], '{["-0123456789tfn')
        if res.finish == ferrox.Finish.EOS:
            json.loads(res.text)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, json=True, grammar='root ::= "a"')
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)

    def test_no_room(self):
        b = self.batcher(n_ctx=64)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("Once upon a time", max_tokens=100)
        self.assertEqual(cm.exception.status, ferrox.Status.NO_ROOM)

    def test_cancel(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)
        b.step()
        b.step()
        row.cancel()
        row.cancel()  # twice is fine
        res = row.result()
        self.assertEqual(res.finish, ferrox.Finish.CANCELLED)
        self.assertLess(res.usage.completion_tokens, 200)
        row.cancel()  # after the end: nothing to do, no error

    def test_cancel_from_another_thread(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)
        started = threading.Event()
        t = threading.Thread(target=lambda: (started.wait(), row.cancel()))
        t.start()
        finish = None
        for ev in row:
            started.set()
            if isinstance(ev, ferrox.Done):
                finish = ev.finish
        t.join()
        self.assertEqual(finish, ferrox.Finish.CANCELLED)

    def test_release_twice_and_close_twice(self):
        b = ferrox.Batcher(self.model, n_ctx=128)
        row = b.submit("Once", max_tokens=50, ignore_eos=True)
        b.step()
        row.release()
        row.release()
        self.assertTrue(row.done)
        self.assertEqual(list(row), [])  # released: no more events
        b.step()
        self.assertEqual(b.pending, 0)
        finished = b.submit("Once", max_tokens=2)
        finished.result()
        finished.release()  # after Done: the handle is gone already
        b.close()
        b.close()
        row.release()
        row.cancel()
        with self.assertRaises(ValueError):
            b.submit("Once")

    def test_context_managers(self):
        with ferrox.Model(MODEL) as m, ferrox.Batcher(m, n_ctx=128) as b:
            with b.submit("Once", max_tokens=50, ignore_eos=True) as row:
                first = next(iter(row))
                self.assertIsInstance(first, ferrox.Text)
            self.assertTrue(row.done)
            b.step()
            self.assertEqual(b.pending, 0)
        self.assertIsNone(b._handle)
        self.assertIsNone(m._handle)

    def test_dropped_row_is_released_by_the_batcher(self):
        b = self.batcher()
        b.submit("Once", max_tokens=100, ignore_eos=True)
        gc.collect()
        self.assertEqual(b.pending, 1)
        b.step()  # releases the orphan on the batcher's own thread
        self.assertEqual(b.pending, 0)
        self.assertEqual(b._rows, {})

    def test_lease(self):
        b = self.batcher()
        # Long enough for whole KV blocks (16 positions): those are pinned.
        prefix = ("You are a knight of the realm. You guard the northern "
                  "gate, speak little and never leave your post.")
        with b.lease(prefix) as lease:
            self.assertEqual(lease.state, ferrox.LeaseState.PENDING)
            for _ in range(10):
                if lease.ready:
                    break
                b.step()
            self.assertTrue(lease.ready)
            self.assertTrue(lease.pinned)
            self.assertEqual(lease.state, ferrox.LeaseState.PINNED)
            suffix = self.model.tokenize(" Speak:", add_special=False)
            res = b.submit(suffix, max_tokens=6, lease=lease).result()
            whole = self.model.tokenize(prefix) + suffix
            self.assertEqual(res.usage.prompt_tokens, len(whole))
            # The row continues the pinned prefix: it generates what the
            # whole prompt does without a lease.
            plain = b.submit(whole, max_tokens=6).result()
            self.assertEqual(res.tokens, plain.tokens)
        lease.release()
        with self.assertRaises(ValueError):
            b.submit("x", lease=lease)
        with self.assertRaises(ValueError):
            lease.state
        # A prefix shorter than one KV block is computed but not pinned.
        with b.lease("Hi") as short:
            b.run()
            self.assertEqual(short.state, ferrox.LeaseState.UNPINNED)


class TestAsync(Base):
    def test_rows_stream_concurrently_without_threads(self):
        b = self.batcher()
        expected = [b.submit(p, max_tokens=10, seed=5, temperature=0.8)
                    .result().text for p in ("Once upon", "The dragon")]
        threads_before = threading.active_count()
        order = []

        async def consume(tag, row):
            parts = []
            async for ev in row:
                order.append(tag)
                if isinstance(ev, ferrox.Text):
                    parts.append(ev.text)
            return "".join(parts)

        async def main():
            r1 = b.submit("Once upon", max_tokens=10, seed=5,
                          temperature=0.8)
            r2 = b.submit("The dragon", max_tokens=10, seed=5,
                          temperature=0.8)
            return await asyncio.gather(consume(1, r1), consume(2, r2))

        got = asyncio.run(main())
        self.assertEqual(got, expected)
        self.assertEqual(threading.active_count(), threads_before)
        # The two consumers took turns rather than one running to the end.
        first_two = order.index(2)
        self.assertLess(first_two, len(order) - order[::-1].index(1) - 1)

    def test_cancelling_the_task_cancels_the_row(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)

        async def main():
            async def consume():
                async for _ in row:
                    pass
            task = asyncio.ensure_future(consume())
            for _ in range(3):
                await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        res = row.result()
        self.assertEqual(res.finish, ferrox.Finish.CANCELLED)

    def test_aresult(self):
        b = self.batcher()
        expected = b.submit("Once", max_tokens=6).result()
        got = asyncio.run(b.submit("Once", max_tokens=6).aresult())
        self.assertEqual(got.text, expected.text)
        self.assertEqual(got.tokens, expected.tokens)


if __name__ == "__main__":
    unittest.main()
