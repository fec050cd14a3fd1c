//! The calls added for tool use, against the real library and the
//! synthetic model: fx_chat_apply_ex on a published template, JSON Schema
//! and tool-call grammars, lazy grammar triggers and fx_event.grammar_start.
//! FERROX_TEST_MODEL names the model; FERROX_TEST_CHAT_DATA the folder
//! tests/data/chat (its place in the source tree when unset).

use ferrox::{
    chat_stop_strings, detect_chat_template, json_schema_to_grammar, render_chat_template,
    tools_to_grammar, Batcher, BatcherOptions, ChatMessage, ChatOptions, ChatTemplateOptions,
    Event, Finish, Model, Request, Status, Tool, ToolFormat,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn model() -> Model {
    let p = std::env::var("FERROX_TEST_MODEL").unwrap_or_default();
    // A missing model is a broken setup, not a reason to skip.
    assert!(
        std::path::Path::new(&p).is_file(),
        "FERROX_TEST_MODEL is not a file: {:?}",
        p
    );
    Model::load(p).expect("load the test model")
}

fn chat_data(parts: &[&str]) -> String {
    let mut path = match std::env::var_os("FERROX_TEST_CHAT_DATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/chat"),
    };
    for p in parts {
        path.push(p);
    }
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

const QWEN: &str = "Qwen-Qwen2.5-7B-Instruct";
const ASSISTANT: ChatOptions = ChatOptions {
    add_assistant: true,
    with_bos: false,
};

#[test]
fn render_chat_template_with_tools() {
    let tmpl = chat_data(&["templates", &format!("{}.jinja", QWEN)]);
    let ctx = chat_data(&["contexts", "tools.json"]);
    let want = chat_data(&["expected", &format!("{}--tools.txt", QWEN)]);
    let opts = ChatTemplateOptions {
        chat: ASSISTANT,
        context_json: Some(&ctx),
        now: 1721952000,
        bos_token: Some("<s>"),
        eos_token: Some("</s>"),
    };
    assert_eq!(render_chat_template(&tmpl, &[], &opts).unwrap(), want);
    // The model's own BOS/EOS texts are <s> and </s>.
    let m = model();
    let opts = ChatTemplateOptions {
        chat: ASSISTANT,
        context_json: Some(&ctx),
        ..Default::default()
    };
    assert_eq!(
        m.render_chat_template(Some(&tmpl), &[], &opts).unwrap(),
        want
    );
    // Messages from the argument, tools from the context.
    let tools = &ctx[ctx.find("\"tools\"").unwrap()..ctx.rfind('}').unwrap()];
    let only_tools = format!("{{{}}}", tools);
    let user = [ChatMessage {
        role: "user",
        content: "Weather in Oslo?",
    }];
    let opts = ChatTemplateOptions {
        chat: ASSISTANT,
        context_json: Some(&only_tools),
        ..Default::default()
    };
    let out = m.render_chat_template(Some(&tmpl), &user, &opts).unwrap();
    assert!(out.contains("\"name\": \"get_weather\""), "{}", out);
    assert!(
        out.ends_with("Weather in Oslo?<|im_end|>\n<|im_start|>assistant\n"),
        "{}",
        out
    );
    // strftime_now runs on the given clock.
    let opts = ChatTemplateOptions {
        now: 1721995200,
        ..Default::default()
    };
    let out = render_chat_template("{{ strftime_now('%Y-%m-%d') }}", &user, &opts).unwrap();
    assert_eq!(out, "2024-07-26");
}

#[test]
fn render_chat_template_errors() {
    let user = [ChatMessage {
        role: "user",
        content: "x",
    }];
    let none = ChatTemplateOptions::default();
    // The synthetic model has no template of its own.
    let err = model()
        .render_chat_template(None, &user, &none)
        .unwrap_err();
    assert_eq!(err.status, Status::MISSING);
    assert!(!err.message.is_empty());
    let err =
        render_chat_template("{{ raise_exception('no tools here') }}", &user, &none).unwrap_err();
    assert_eq!(err.status, Status::BAD_TEMPLATE);
    assert!(err.message.contains("no tools here"), "{}", err);
    let opts = ChatTemplateOptions {
        context_json: Some("[1, 2]"),
        ..Default::default()
    };
    let err = render_chat_template("{{ messages }}", &user, &opts).unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(!err.message.is_empty());
    let twice = r#"{"messages": [{"role": "user", "content": "y"}]}"#;
    let opts = ChatTemplateOptions {
        context_json: Some(twice),
        ..Default::default()
    };
    let err = render_chat_template("{{ messages }}", &user, &opts).unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    let opts = ChatTemplateOptions {
        context_json: Some("{}\0"),
        ..Default::default()
    };
    let err = render_chat_template("{{ messages }}", &user, &opts).unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);

    assert_eq!(chat_stop_strings("chatml").unwrap()[0], "<|im_end|>");
    assert!(chat_stop_strings("llama3").unwrap().contains(&"<|eot_id|>"));
    assert_eq!(
        chat_stop_strings("{% unclosed").unwrap_err().status,
        Status::BAD_TEMPLATE
    );
    let qwen = chat_data(&["templates", &format!("{}.jinja", QWEN)]);
    assert_eq!(detect_chat_template(&qwen).unwrap(), "chatml");
    assert_eq!(detect_chat_template("{{ messages }}").unwrap(), "jinja");
    assert_eq!(
        detect_chat_template("{% unclosed").unwrap_err().status,
        Status::BAD_TEMPLATE
    );
}

// ---- a small JSON reader: the crate has no dependencies, nor its tests --

#[derive(Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>), // in document order
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.i) {
                None => return Err("unterminated string".into()),
                Some(b'"') => {
                    self.i += 1;
                    return String::from_utf8(out).map_err(|e| e.to_string());
                }
                Some(b'\\') => {
                    let c = *self.s.get(self.i + 1).ok_or("bad escape")?;
                    out.push(match c {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'"' | b'\\' | b'/' => c,
                        _ => return Err(format!("escape {:?} not handled here", c as char)),
                    });
                    self.i += 2;
                }
                Some(&c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }
    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.s.get(self.i).copied() {
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(members));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.eat(b':')?;
                    members.push((k, self.value()?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(members));
                        }
                        _ => return Err(format!("bad object at {}", self.i)),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(format!("bad array at {}", self.i)),
                    }
                }
            }
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Json::Bool(true))
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Json::Bool(false))
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Json::Null)
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"-+.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                t.parse()
                    .map(Json::Num)
                    .map_err(|_| format!("bad value at {}", start))
            }
        }
    }
}

/// Parses one whole JSON document.
fn parse_json(s: &str) -> Result<Json, String> {
    let mut r = Reader {
        s: s.as_bytes(),
        i: 0,
    };
    let v = r.value()?;
    r.ws();
    if r.i != s.len() {
        return Err(format!("trailing text at {}", r.i));
    }
    Ok(v)
}

fn object(v: &Json) -> BTreeMap<&str, &Json> {
    match v {
        Json::Obj(m) => m.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        _ => panic!("not an object: {:?}", v),
    }
}

fn small_int(v: &Json, max: f64) -> bool {
    matches!(v, Json::Num(n) if n.fract() == 0.0 && *n >= 0.0 && *n <= max)
}

#[test]
fn json_reader_reads_and_refuses() {
    let v = parse_json(r#" {"a": [1, -2.5e1, true, null], "b\"": {}} "#).unwrap();
    assert_eq!(object(&v).len(), 2);
    assert!(parse_json(r#"{"a": 1"#).is_err());
    assert!(parse_json("[1] 2").is_err());
}

#[test]
fn json_schema_grammar_holds_rows() {
    let g = json_schema_to_grammar(
        r#"{"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "ok": {"type": "boolean"}}, "required": ["n", "ok"]}"#,
    )
    .unwrap();
    assert!(g.contains("root ::="), "{}", g);
    let m = model();
    let b = Batcher::new(
        &m,
        &BatcherOptions {
            n_ctx: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    for seed in 0..3 {
        let req = Request::text("Data:")
            .max_tokens(64)
            .temperature(1.0)
            .seed(seed)
            .grammar(g.clone());
        let c = b.submit(&req).unwrap().wait().unwrap();
        assert_eq!(c.finish, Finish::Eos, "{:?}", c.text);
        let v = parse_json(&c.text).unwrap_or_else(|e| panic!("{:?}: {}", c.text, e));
        let o = object(&v);
        assert_eq!(o.len(), 2, "{:?}", c.text);
        assert!(small_int(o["n"], 9.0), "{:?}", c.text);
        assert!(matches!(o["ok"], Json::Bool(_)), "{:?}", c.text);
    }

    let err = json_schema_to_grammar(
        r#"{"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 3}}}"#,
    )
    .unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(
        err.message.contains("multipleOf") && err.message.contains("/properties/age"),
        "{}",
        err
    );
    let err = json_schema_to_grammar("{not json").unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(!err.message.is_empty());
    assert_eq!(
        json_schema_to_grammar("").unwrap_err().status,
        Status::INVALID_ARG
    );
}

/// Two tools whose calls are finite (an enum, bounded integers), so a row
/// that starts one always ends.
const TOOLS: [Tool<'static>; 2] = [
    Tool {
        name: "get_weather",
        parameters: Some(
            r#"{"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}"#,
        ),
    },
    Tool {
        name: "add",
        parameters: Some(
            r#"{"type": "object", "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}"#,
        ),
    },
];

/// Checks the Hermes call `text` starts with (the newlines around its
/// object are optional in the grammar) against TOOLS' schemas; returns the
/// rest of the text.
fn check_hermes_call(text: &str) -> &str {
    let body = text
        .strip_prefix("<tool_call>")
        .unwrap_or_else(|| panic!("no tool call at {:?}", text));
    let end = body
        .find("</tool_call>")
        .unwrap_or_else(|| panic!("unclosed call {:?}", text));
    let v = parse_json(&body[..end]).unwrap_or_else(|e| panic!("{:?}: {}", &body[..end], e));
    let call = object(&v);
    assert_eq!(
        call.keys().copied().collect::<Vec<_>>(),
        ["arguments", "name"],
        "{:?}",
        v
    );
    let args = object(call["arguments"]);
    match call["name"] {
        Json::Str(n) if n == "get_weather" => {
            assert_eq!(args.len(), 1, "{:?}", v);
            assert!(
                matches!(args["city"], Json::Str(c) if c == "Paris" || c == "Oslo"),
                "{:?}",
                v
            );
        }
        Json::Str(n) if n == "add" => {
            assert_eq!(args.len(), 2, "{:?}", v);
            assert!(
                small_int(args["a"], 99.0) && small_int(args["b"], 99.0),
                "{:?}",
                v
            );
        }
        other => panic!("tool {:?}", other),
    }
    &body[end + "</tool_call>".len()..]
}

/// Makes the synthetic model (random weights) write `words` first, token
/// by token: each token's logit bias is 100 below the one before, and the
/// presence penalty pushes a token already written below every later one.
fn steer(m: &Model, words: &str, mut req: Request) -> Request {
    let ids = m.tokenize(words, false, false).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        assert!(!ids[..i].contains(&id), "{:?} repeats token {}", words, id);
        req = req.logit_bias(id, 1000.0 - 100.0 * i as f32);
    }
    req.presence_penalty(100.0 * (ids.len() + 1) as f32)
}

#[test]
fn tool_formats_and_errors() {
    assert_eq!(ToolFormat::Hermes.trigger(), "<tool_call>");
    assert_eq!(ToolFormat::Llama3.trigger(), "{\"name\"");
    assert_eq!(ToolFormat::Mistral.trigger(), "[TOOL_CALLS]");
    let err = tools_to_grammar(
        &[Tool {
            name: "bad name!",
            parameters: None,
        }],
        ToolFormat::Hermes,
    )
    .unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(err.message.contains("tool 0's name"), "{}", err);
    let bad = [Tool {
        name: "ok",
        parameters: Some(r#"{"type": "object", "not": {}}"#),
    }];
    let err = tools_to_grammar(&bad, ToolFormat::Hermes).unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(err.message.contains("not"), "{}", err);
    assert_eq!(
        tools_to_grammar(&[], ToolFormat::Hermes)
            .unwrap_err()
            .status,
        Status::INVALID_ARG
    );
    let nul = [Tool {
        name: "a\0b",
        parameters: None,
    }];
    assert_eq!(
        tools_to_grammar(&nul, ToolFormat::Hermes)
            .unwrap_err()
            .status,
        Status::INVALID_ARG
    );
    // Any JSON object as arguments; the grammar starts with the trigger.
    let g = tools_to_grammar(
        &[Tool {
            name: "anything",
            parameters: None,
        }],
        ToolFormat::Mistral,
    )
    .unwrap();
    assert!(g.contains("\"[TOOL_CALLS]\""), "{}", g);
}

#[test]
fn lazy_tool_call_grammar() {
    let trigger = ToolFormat::Hermes.trigger();
    let g = tools_to_grammar(&TOOLS, ToolFormat::Hermes).unwrap();
    let m = model();
    let b = Batcher::new(
        &m,
        &BatcherOptions {
            n_ctx: Some(1024),
            ..Default::default()
        },
    )
    .unwrap();
    // The model writes some prose, then the trigger; the grammar must hold
    // everything from there to complete calls.
    let words = format!("Sure{}", trigger);
    let req = Request::text("Weather?")
        .max_tokens(600)
        .grammar(g.clone())
        .grammar_triggers([trigger]);
    let row = b.submit(&steer(&m, &words, req)).unwrap();
    let mut out = String::new();
    let mut starts = Vec::new();
    let mut done = None;
    for ev in row.events() {
        match ev.unwrap() {
            Event::Text(t) => {
                out.push_str(&t);
                starts.push(t.grammar_start);
            }
            Event::Done(d) => done = Some(d),
            Event::Token(_) => {}
        }
    }
    let done = done.expect("a Done event");
    assert_eq!(done.finish, Finish::Eos, "{:?}", out);
    let start = done.grammar_start.expect("grammar_start in Done") as usize;
    assert!(start > 0 && start < out.len(), "{} in {:?}", start, out);
    assert!(out[..start].trim().starts_with("Sure"), "{:?}", out);
    // None until a Text reaches the trigger, then its offset.
    let first = starts
        .iter()
        .position(|s| s.is_some())
        .expect("a Text with grammar_start");
    assert!(
        first > 0 && starts[..first].iter().all(|s| s.is_none()),
        "{:?}",
        starts
    );
    assert!(
        starts[first..].iter().all(|&s| s == Some(start as u64)),
        "{:?}",
        starts
    );
    let mut text = &out[start..];
    assert!(text.starts_with(trigger), "{:?}", text);
    while !text.is_empty() {
        // every call the grammar allowed, back to back
        text = check_hermes_call(text);
        if !text.is_empty() {
            text = text
                .strip_prefix('\n')
                .unwrap_or_else(|| panic!("between calls: {:?}", text));
        }
    }

    // Without the trigger the same request never meets the grammar.
    let c = b
        .submit(&steer(&m, &words, Request::text("Weather?").max_tokens(12)))
        .unwrap()
        .wait()
        .unwrap();
    assert!(c.text.contains(trigger), "{:?}", c.text);
    assert_eq!(c.grammar_start, None);
    // Trigger errors come back from submit with the library's message.
    let err = b
        .submit(
            &Request::text("x")
                .max_tokens(4)
                .grammar(g.clone())
                .grammar_triggers([""]),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(!err.message.is_empty());
    let err = b
        .submit(
            &Request::text("x")
                .max_tokens(4)
                .grammar(g.clone())
                .grammar_trigger_tokens(vec![m.vocab_size() as i32]),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);
    let err = b
        .submit(
            &Request::text("x")
                .max_tokens(4)
                .grammar(g)
                .grammar_triggers(["a\0"]),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);

    // A row without a lazy grammar has no grammar_start anywhere.
    for ev in b
        .submit(&Request::text("Hi").max_tokens(3))
        .unwrap()
        .events()
    {
        match ev.unwrap() {
            Event::Text(t) => assert_eq!(t.grammar_start, None),
            Event::Done(d) => assert_eq!(d.grammar_start, None),
            Event::Token(_) => {}
        }
    }
}
