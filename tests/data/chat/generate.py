#!/usr/bin/env python3
"""Regenerates tests/data/chat (development time only; the tests read the
committed files and never run Python).

Expected outputs come from jinja2 configured as Hugging Face transformers'
apply_chat_template configures it: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension, its tojson
filter (json.dumps, ensure_ascii=False), raise_exception, and
strftime_now on a fixed clock (2024-07-26 00:00 UTC, `now` = 1721952000),
with tools=None and documents=None unless a context gives them.

usage: generate.py LLAMA_CPP_TEST_CPP TEMPLATE_DIR...
  LLAMA_CPP_TEST_CPP: llama.cpp's tests/test-chat-template.cpp
  TEMPLATE_DIR: directories of *.jinja model templates (llama.cpp's and
  ik_llama.cpp's models/templates/, plus google-gemma-3-it.jinja)
"""
import datetime
import glob
import json
import os
import re
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2024, 7, 26, tzinfo=datetime.timezone.utc)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError("raise: " + message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def render(template, context):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    kw = dict(tools=None, documents=None)
    kw.update(context)
    try:
        return env.from_string(template).render(**kw), None
    except Exception as e:  # the C side expects FX_ERR_BAD_TEMPLATE
        return None, str(e)


def c_string(body):
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        i += 2
        simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
        if nxt in simple:
            out.append(simple[nxt])
        elif nxt == "x":
            h = re.match(r"[0-9a-fA-F]+", body[i:]).group(0)
            out.append(chr(int(h, 16)))
            i += len(h)
        else:
            raise ValueError("escape \\" + nxt)
    return "".join(out)


def llama_cpp_cases(path):
    src = open(path, encoding="utf-8").read()
    body = src[src.index("std::vector<TestCase> test_cases {"):
               src.index("std::vector<char> formatted_chat")]
    body = re.sub(r"\n\s*//[^\n]*", "", body)
    lit = re.compile(r'(?:u8)?"((?:[^"\\]|\\.)*)"', re.S)
    cases = []
    for block in re.split(r"\n        \{\n", body)[1:]:
        fields = {}
        for m in re.finditer(r"/\* \.(\w+)= \*/\s*(.*?)(?=,\s*\n\s*(?:/\*|\}))",
                             block, re.S):
            value = m.group(2).strip()
            if value in ("true", "false"):
                fields[m.group(1)] = value == "true"
            else:
                fields[m.group(1)] = "".join(c_string(p) for p in lit.findall(value))
        cases.append(fields)
    return cases


CONV = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
    {"role": "assistant", "content": "   I am an assistant   "},
    {"role": "user", "content": "Another question"},
]
THINK = [
    {"role": "user", "content": "Q"},
    {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "<think>r2</think>A2"},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}},
        "required": ["city"]}}}]
TOOL_CONV = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}", "name": "get_weather"},
    {"role": "assistant", "content": "It is 21.5 degrees."},
    {"role": "user", "content": "Thanks \u00e9\u00e8 \u4e2d\u6587 \"quoted\" \\ back"},
]
# name: (context, add_generation_prompt)
SWEEP = {
    "conv": ({"messages": CONV}, True),
    "conv-nogen": ({"messages": CONV[1:]}, False),
    "think": ({"messages": THINK}, True),
    "think-off": ({"messages": THINK, "enable_thinking": False}, True),
    "think-on": ({"messages": THINK[:1], "enable_thinking": True}, True),
    "tools": ({"messages": TOOL_CONV, "tools": TOOLS}, True),
    "tool-msgs": ({"messages": TOOL_CONV}, True),
}


# Small templates, one behaviour each, rendered with SEMANTICS_CONTEXT:
# operators, literals, filters, tests, methods, scoping, whitespace
# control. The whole-line cases of micro.txt are split at " || ".
SEMANTICS_CONTEXT = {
    "messages": [{"role": "system", "content": "hello"},
                 {"role": "user", "content": "u1"},
                 {"role": "user", "content": "u2"}],
    "x": True, "y": False, "a": "A", "b": " B ", "l": [1, 2],
    "s": "hi there", "n": 7, "lst": [3, 1, 2], "d": {"k": "v", "a": 2},
}


def semantics():
    src = open(os.path.join(HERE, "semantics.in"), encoding="utf-8").read()
    out = []
    for block in src.split("\n%%%% case\n")[1:]:
        tmpl = block[:-1] if block.endswith("\n") else block
        ctx = dict(SEMANTICS_CONTEXT)
        ctx.update(add_generation_prompt=False, bos_token="<s>", eos_token="</s>")
        res, err = render(tmpl, ctx)
        out.append("%%%% template\n" + tmpl + "\n")
        if res is None:
            out.append("%%%% raises\n" + (err[len("raise: "):] if err.startswith("raise: ") else "") + "\n")
        else:
            out.append("%%%% expected\n" + res + "\n")
    out.append("%%%% end\n")
    with open(os.path.join(HERE, "semantics.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("".join(out))
    with open(os.path.join(HERE, "semantics.json"), "w", encoding="utf-8") as f:
        json.dump(SEMANTICS_CONTEXT, f, ensure_ascii=False)


def main():
    semantics()
    rows = []
    os.makedirs(os.path.join(HERE, "templates"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "contexts"), exist_ok=True)
    for old in glob.glob(os.path.join(HERE, "expected", "*")):
        os.remove(old)

    def add(case, tname, text, cname, ctx, gen, bos, eos):
        with open(os.path.join(HERE, "templates", tname), "w", encoding="utf-8",
                  newline="") as f:
            f.write(text)
        with open(os.path.join(HERE, "contexts", cname), "w", encoding="utf-8") as f:
            json.dump(ctx, f, ensure_ascii=False)
        full = dict(ctx)
        full.update(add_generation_prompt=gen, bos_token=bos, eos_token=eos)
        out, err = render(text, full)
        if out is not None:
            ename = case + ".txt"
            data = out
        else:
            ename = case + ".err"
            data = err[len("raise: "):] if err.startswith("raise: ") else ""
        with open(os.path.join(HERE, "expected", ename), "w", encoding="utf-8",
                  newline="") as f:
            f.write(data)
        rows.append("\t".join([case, tname, cname, "1" if gen else "0", bos,
                               eos, ename]))

    for i, c in enumerate(llama_cpp_cases(sys.argv[1])):
        slug = "llamacpp-%02d" % i
        ctx = {"messages": CONV}
        if "GigaChat" in c["name"]:
            # Read by the template, passed by transformers from the tokenizer.
            ctx["additional_special_tokens"] = ["<|message_sep|>", "<|role_sep|>",
                                                "<|function_call|>", "<|function_result|>"]
            slug += "-extra"
        cname = "conv-giga.json" if "GigaChat" in c["name"] else "conv.json"
        add(slug, slug + ".jinja", c["template_str"], cname, ctx, True,
            c.get("bos_token", ""), c.get("eos_token", ""))
    seen = {}
    for d in sys.argv[2:]:
        for path in sorted(glob.glob(os.path.join(d, "*.jinja"))):
            seen[os.path.basename(path)] = open(path, encoding="utf-8").read()
    for tname, text in sorted(seen.items()):
        for sname, (ctx, gen) in SWEEP.items():
            case = tname[:-len(".jinja")] + "--" + sname
            add(case, tname, text, sname + ".json", ctx, gen, "<s>", "</s>")
    # firefunction v2 reads `functions` and `datetime` variables (and
    # wraps its system prompt in a {% filter %} block).
    add("fireworks-ai-llama-3-firefunction-v2--functions",
        "fireworks-ai-llama-3-firefunction-v2.jinja",
        seen["fireworks-ai-llama-3-firefunction-v2.jinja"], "functions.json",
        {"messages": CONV[1:], "functions": "get_weather", "tools": TOOLS,
         "datetime": "2024-07-26"},
        True, "<s>", "</s>")
    with open(os.path.join(HERE, "cases.tsv"), "w", encoding="utf-8") as f:
        f.write("# case\ttemplate\tcontext\tadd_generation_prompt\tbos\teos\texpected\n")
        f.write("\n".join(rows) + "\n")
    print(len(rows), "cases")


main()
