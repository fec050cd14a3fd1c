"""Chat templates, with and without a model. Environment: fxtest.py."""

import json
import unittest

# fxtest first: it puts the package under test on sys.path.
from fxtest import chat_data, Base, setUpModule  # noqa: F401

import ferrox  # noqa: E402


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


if __name__ == "__main__":
    unittest.main()
