"""Structured output: JSON Schema and tool-call grammars. Environment:
fxtest.py."""

import json
import re
import unittest

# fxtest first: it puts the package under test on sys.path.
from fxtest import Base, setUpModule  # noqa: F401

import ferrox  # noqa: E402


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


if __name__ == "__main__":
    unittest.main()
