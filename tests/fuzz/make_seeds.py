#!/usr/bin/env python3
"""Writes the hand-made seed corpora of fuzz_tokenizer, fuzz_text,
fuzz_grammar and fuzz_api (the GGUF seeds come from gen_gguf_seeds.c).
Usage: python3 tests/fuzz/make_seeds.py tests/fuzz/corpus"""
import os, struct, sys

root = sys.argv[1]

def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

# ---- tokenizer: mode byte + text ----
texts = [
    b"Hello world",
    b" leading and  double  spaces\n\ttabs\r\n",
    "caf\u00e9 na\u00efve \u00fcber \u4e2d\u6587 \U0001F600 \u0928\u092e\u0938\u094d\u0924\u0947".encode(),
    b"<s>special</s> <|im_end|> <unk> text",
    b"\xff\xfe invalid \xc3 \xed\xa0\x80 \xf0\x9f\x98 \xc0\xaf end",
    b"numbers 1234567890 3.14159 -42 1e10",
    b"don't I'll we've they're it's",
    b"\x00nul\x00bytes\x00",
    b"    ",
    b"",
    b"a" * 200,
    b"\xe2\x96\x81 already marked \xe2\x96\x81\xe2\x96\x81",
    b"CamelCase snake_case kebab-case SHOUT",
    b"x\n\n\n\ny",
]
i = 0
for t in texts:
    for mode in (0x00, 0x01, 0x06, 0x07, 0x4B, 0x8C, 0xF1, 0xFF, 0x30, 0x31):
        if i % 3 == 0 or mode in (0x00, 0x01):
            put("tokenizer", "t%02d_%02x" % (texts.index(t), mode), bytes([mode]) + t)
        i += 1

# ---- text: head, stops (len byte + bytes), chunk seed, text ----
def text_seed(stops, mode, seed, txt):
    out = bytes([(len(stops) & 7) | (mode << 3)])
    for s in stops:
        out += bytes([len(s)]) + s
    return out + bytes([seed]) + txt

euro = "\u20ac".encode()
emoji = "\U0001F600".encode()
cases = [
    ([], 0, 1, b"plain text with no stops"),
    ([b"aab"], 0, 2, b"xxaaabyy"),
    ([b"END"], 5, 3, b"some text then EN and END and more"),
    ([b"ab", b"b"], 9, 4, b"zzab"),
    ([b"abc", b"bc", b"c"], 1, 5, b"..abc.."),
    ([euro], 2, 6, b"price " + euro + b"100"),
    ([emoji], 0, 7, b"smile " + emoji[:2] + b" " + emoji + b"!"),
    ([b"<|im_end|>"], 3, 8, b"answer<|im_en<|im_end|>tail"),
    ([b""], 0, 9, b"empty stop"),
    ([b"\xff"], 0, 10, b"invalid stop"),
    ([b"a"] * 7, 31, 11, b"bbbba"),
    ([b"\n\n"], 21, 12, b"line\nline\n\nrest"),
    ([], 2, 13, b"\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\xbc \xf4\x90\x80\x80 \xed\xa0\x80"),
    ([b"x"], 10, 14, b"\xf0\x9f\x98"),
    ([b"Hello"], 7, 15, b"Hell" + euro + b"Hello"),
    ([b"aaa", b"aa"], 13, 16, b"aaaaaaa"),
]
for n, (stops, mode, seed, txt) in enumerate(cases):
    put("text", "s%02d" % n, text_seed(stops, mode & 31, seed, txt))

# ---- grammar: flags, u16 length, grammar text, then the text ----
def gseed(flags, gram, txt):
    g = gram.encode() if isinstance(gram, str) else gram
    t = txt.encode() if isinstance(txt, str) else txt
    return bytes([flags]) + struct.pack("<H", len(g)) + g + t

grammars = [
    (0x00, 'root ::= "ab" [0-9]+ ("x" | "yz")? "!"{1,2}\n', "ab123yz!!"),
    (0x02, 'root ::= [^a\\n] . "\\u00e9" [\\u4e00-\\u9fff]\n', "b\u00e9\u00e9\u4e2d"),
    (0x06, 'root ::= expr "=" term\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | "(" expr ")"\n', "(1+2)*3=9"),
    (0x08, 'root ::= ("yes" | "no") "\\n"\n', "\x01\x00\x02\x00\x03\x00"),
    (0x0A, 'root ::= "{" ws "\\"k\\"" ws ":" ws [0-9]+ ws "}"\nws ::= [ \\t\\n]*\n', "\x05\x00" * 10),
    (0x01, "", '{"a": [1, 2.5e3, true, null, {}], "b\\n": "x"}'),
    (0x09, "", "\x07\x00" * 12),
    (0x03, "", ' [1, -0.5e+2, "\\u00e9"] '),
    (0x10, 'start ::= "s" rest\nrest ::= [a-z]* "."\n', "sabc."),
    (0x00, 'root ::= x\nx ::= x "a" | "b"\n', "baa"),
    (0x00, 'root ::= undefined\n', "x"),
    (0x00, 'root ::= ("a"*)*\n', "aaaa"),
    (0x00, 'root ::= ("")*\n', ""),
    (0x00, 'root ::= "a"{1000}\n', "aaa"),
    (0x00, 'root ::= ' + "(" * 200 + '"a"' + ")" * 200 + "\n", "a"),
    (0x00, 'root ::= "unterminated\n', "u"),
    (0x00, 'root ::= [a-\n', "a"),
    (0x00, 'root ::= "\\x4" "\\q"\n', "J"),
    (0x00, '# comment only\n', ""),
    (0x00, 'root ::= a\na ::= b\nb ::= c\nc ::= "end" | a "+"\n', "end++"),
    (0x04, 'root ::= [\\x00-\\U0010FFFF]*\n', "\x00\xff\U0010ffff"),
    (0x00, 'root ::= "a" | ""\nother ::= root root\n', "a"),
    (0x0C, 'root ::= [a-z]{2,5} ("," [a-z]{2,5})*\n', "\x11\x00" * 16),
]
for n, (f, g, t) in enumerate(grammars):
    put("grammar", "g%02d" % n, gseed(f, g, t))

# ---- api: 3 param bytes, then operations (see fuzz_api.c) ----
SUB, STEP, POLL, CANCEL, REL, LEASE, LREL, MISUSE = 0, 2, 4, 5, 6, 7, 8, 9
def sub_text(text, max_tokens=4, a=0, c=0, extra=b""):
    t = text.encode()
    return bytes([SUB, a, c, len(t)]) + t + bytes([max_tokens]) + extra
def sub_toks(ids, max_tokens=4, a=1, c=0, extra=b""):
    return bytes([SUB, a, c, len(ids)]) + bytes(ids) + bytes([max_tokens]) + extra
steps = lambda n: bytes([STEP | 0x10]) * n
api = [
    bytes([0x01, 16, 0x00]) + sub_text("<t1><t2>") + steps(8),
    bytes([0x03, 4, 0x00]) + sub_toks([1, 2, 3]) + sub_toks([4, 5]) + steps(4) +
        bytes([CANCEL, 0]) + steps(4) + bytes([POLL]),
    bytes([0x02, 8, 0x85]) + sub_toks([1] * 20, 8) + sub_toks([2] * 20, 8) +
        sub_toks([3] * 20, 8) + steps(20),
    bytes([0x01, 2, 0x00]) + bytes([LEASE, 0, 6]) + b"<t1><t" + steps(3) +
        sub_text("<t3>", 3, a=0x20, extra=bytes([0, 0])) + steps(3) + bytes([LREL, 0]) + steps(4),
    bytes([0x00, 1, 0x00]) + sub_toks([7, 8, 9]) + bytes([REL, 0, REL, 0, CANCEL, 0]) + steps(2) + bytes([MISUSE]),
    bytes([0x03, 32, 0x00]) + sub_toks([5, 6], 6, a=0x41, c=0x31, extra=bytes([3, 9, 1, 0x80])) + steps(10),
    bytes([0x03, 32, 0x00]) + sub_toks([5, 6], 6, a=0x41, extra=bytes([7, 0x02])) + steps(10),
    bytes([0x11, 5, 0x00]) + sub_toks([0xC0, 0xFF]) + sub_text("", 2) + sub_toks([1, 2], a=0x03, extra=bytes([250])) + steps(3),
    bytes([0x0F, 40, 0x00]) + sub_toks([1, 2, 3, 4], 10, c=0x0F, extra=bytes([15, 5, 5, 2, 42])) + steps(12),
    bytes([0x04, 3, 0x83]) + (sub_toks([9] * 10, 5) + bytes([STEP])) * 5 + bytes([CANCEL, 2, REL, 3]) + steps(10),
]
for n, a in enumerate(api):
    put("api", "a%02d" % n, a)
