"""The struct layouts, argument checks and models. Environment: fxtest.py."""

import ctypes
import os
import tempfile
import unittest

# fxtest first: it puts the package under test on sys.path.
from fxtest import INSTALLED, MODEL, Base, setUpModule  # noqa: F401

import ferrox  # noqa: E402
from ferrox import _capi  # noqa: E402


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
        # The same tokens computed from the mapping as from the copy, made
        # over the first steps or at once.
        texts = []
        for mapped, eager in ((False, False), (True, False), (False, True)):
            with ferrox.Model(MODEL, mapped_weights=mapped,
                              eager_copy=eager) as m:
                b = ferrox.Batcher(m, n_ctx=128)
                texts.append(b.submit("Once upon", max_tokens=12,
                                      temperature=0.9,
                                      seed=7).result().text)
                b.close()
        self.assertTrue(texts[0])
        self.assertEqual(texts[0], texts[1])
        self.assertEqual(texts[0], texts[2])

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


if __name__ == "__main__":
    unittest.main()
