//! The Rust binding against the real library and a small synthetic model.
//! FERROX_TEST_MODEL names the model; FERROX_LIB_DIR (read by build.rs)
//! the library. The ctest binding_rust sets both.

use ferrox::sys;
use ferrox::{
    apply_chat_template, chat_families, version, Batcher, BatcherOptions, ChatMessage, ChatOptions,
    Event, Finish, Lease, LeaseState, Model, ModelOptions, Request, Row, SpecialToken, Status,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

fn model_path() -> String {
    let p = std::env::var("FERROX_TEST_MODEL").unwrap_or_default();
    // A missing model is a broken setup, not a reason to skip.
    assert!(
        std::path::Path::new(&p).is_file(),
        "FERROX_TEST_MODEL is not a file: {:?}",
        p
    );
    p
}

fn model() -> Model {
    Model::load(model_path()).expect("load the test model")
}

fn batcher(m: &Model) -> Batcher {
    Batcher::new(
        m,
        &BatcherOptions {
            n_ctx: Some(256),
            ..Default::default()
        },
    )
    .expect("batcher")
}

fn sampled(prompt: &str, max_tokens: u32, seed: u64) -> Request {
    Request::text(prompt)
        .max_tokens(max_tokens)
        .temperature(0.9)
        .seed(seed)
}

#[test]
fn event_layout() {
    // fx_poll_sized refuses a size below fx_event's first layout and
    // accepts that size: sys::fx_event up to grammar_start must be exactly
    // it, and grammar_start the one member after it.
    let path = std::ffi::CString::new(model_path()).unwrap();
    let mut m: *mut sys::fx_model = std::ptr::null_mut();
    let mut b: *mut sys::fx_batcher = std::ptr::null_mut();
    let mut err = [0 as std::os::raw::c_char; 256];
    unsafe {
        let st = sys::fx_model_load(path.as_ptr(), std::ptr::null(), &mut m,
                                    err.as_mut_ptr(), err.len());
        assert_eq!(st, sys::FX_OK);
        let st = sys::fx_batcher_create(m, std::ptr::null(), &mut b,
                                        err.as_mut_ptr(), err.len());
        assert_eq!(st, sys::FX_OK);
        let mut ev: sys::fx_event = std::mem::zeroed();
        let size = std::mem::size_of::<sys::fx_event>();
        let first = (&ev.grammar_start as *const i64 as usize) - (&ev as *const _ as usize);
        assert_eq!(size, first + 8);
        let mut st = -1;
        for s in [first, size] {
            assert_eq!(sys::fx_poll_sized(b, &mut ev, s, &mut st), 0);
            assert_eq!(st, sys::FX_OK);
        }
        sys::fx_poll_sized(b, &mut ev, first - 1, &mut st);
        assert_eq!(st, Status::INVALID_ARG.0);
        sys::fx_batcher_free(b);
        sys::fx_model_free(m);
    }
}

#[test]
fn struct_layouts_match_the_library() {
    // fx_*_init_sized writes defaults only inside the size it is given and
    // stores that size in struct_size. Given our size, the library's
    // defaults must land on the fields declared here (a drifted layout
    // reads them at other offsets), and the bytes past our struct must
    // stay untouched.
    macro_rules! check {
        ($init:path, $t:ty, |$v:ident| $body:block) => {{
            const GUARD: u64 = 0xa5a5_a5a5_a5a5_a5a5;
            let mut buf = [GUARD; 512];
            let size = std::mem::size_of::<$t>();
            assert!(size % 8 == 0 && size + 64 <= 512 * 8);
            unsafe { $init(buf.as_mut_ptr() as *mut $t, size) };
            assert!(buf[size / 8..].iter().all(|&w| w == GUARD), stringify!($t));
            let $v: &$t = unsafe { &*(buf.as_ptr() as *const $t) };
            assert_eq!($v.struct_size as usize, size, stringify!($t));
            $body
        }};
    }
    check!(sys::fx_model_params_init_sized, sys::fx_model_params, |p| {
        assert_eq!(p.log_level, 1);
    });
    check!(sys::fx_model_info_init_sized, sys::fx_model_info, |i| {
        assert_eq!(i.file_size, 0);
    });
    check!(sys::fx_batcher_params_init_sized, sys::fx_batcher_params, |p| {
        assert_eq!(p.log_level, 1);
    });
    check!(sys::fx_request_init_sized, sys::fx_request, |r| {
        assert_eq!(r.max_tokens, 256);
        assert_eq!(r.top_p, 1.0);
        assert_eq!(r.typical_p, 1.0);
        assert_eq!(r.repeat_penalty, 1.0);
        assert_eq!(r.penalty_last_n, 64);
        assert_eq!(r.n_grammar_triggers, 0);
        assert_eq!(r.n_grammar_trigger_tokens, 0);
    });
    check!(sys::fx_tensor_info_init_sized, sys::fx_tensor_info, |t| {
        assert_eq!(t.n_dims, 0);
        assert_eq!(t.n_bytes, 0);
    });
    check!(sys::fx_chat_options_init_sized, sys::fx_chat_options, |o| {
        assert_eq!(o.flags, 0);
        assert_eq!(o.now, 0);
        assert!(o.context_json.is_null() && o.bos_token.is_null() && o.eos_token.is_null());
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Model>();
    check::<Batcher>();
    check::<Row>();
    check::<Lease>();
    check::<Request>();
}

#[test]
fn version_is_abi_0() {
    let v = version();
    assert!(v.starts_with("0."), "{}", v);
    assert_eq!(format!("{:?}", Status::GRAMMAR), "GRAMMAR");
    assert_eq!(format!("{:?}", Status(999)), "Status(999)");
}

#[test]
fn every_library_status_has_a_name() {
    // A status the library describes but this crate cannot name would
    // print as a bare number: the list was not updated with the header.
    for code in 0..64 {
        let known = Status(code).description() != "unknown status";
        let named = format!("{:?}", Status(code)) != format!("Status({})", code);
        assert_eq!(known, named, "status {} ({})", code, Status(code).description());
    }
}

#[test]
fn model_info_and_tokenizer() {
    let m = model();
    let info = m.info().unwrap();
    assert_eq!(info.arch, "llama");
    assert_eq!((info.n_layer, info.n_embd), (4, 256));
    assert_eq!(info.n_vocab, m.vocab_size());

    let text = "Hello world, once upon a time";
    let toks = m.tokenize(text, true, false).unwrap();
    assert_eq!(Some(toks[0]), m.special_token(SpecialToken::Bos));
    assert_eq!(m.tokenize(text, false, false).unwrap(), toks[1..].to_vec());
    assert_eq!(m.detokenize(&toks, true, false).unwrap(), text);
    let pieces: Vec<u8> = toks[1..]
        .iter()
        .flat_map(|&t| m.token_to_piece(t, false).unwrap())
        .collect();
    assert_eq!(String::from_utf8(pieces).unwrap().trim(), text);
    let eos = m.special_token(SpecialToken::Eos).unwrap();
    assert!(m.is_eog(eos) && !m.is_eog(toks[1]));

    // More tokens than the first guess, more bytes than the first
    // detokenize buffer: both retry paths.
    let long: Vec<String> = (0..400).map(|i| i.to_string()).collect();
    let long = long.join(" ");
    let toks = m.tokenize(&long, false, false).unwrap();
    assert_eq!(m.detokenize(&toks, false, false).unwrap(), long);

    let err = m
        .detokenize(&[m.vocab_size() as i32 + 5], false, false)
        .unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);
    assert!(err.message.contains("out of range"), "{}", err);
}

#[test]
fn load_errors_carry_status_and_message() {
    let err = Model::load("/nonexistent/ferrox-model.gguf").err().unwrap();
    assert_eq!(err.status, Status::IO);
    assert!(err.message.contains("ferrox-model.gguf"), "{}", err);
    assert!(err.to_string().contains("IO"), "{}", err);

    let junk = std::env::temp_dir().join(format!("ferrox-rust-junk-{}.gguf", std::process::id()));
    std::fs::write(&junk, "not a model".repeat(20)).unwrap();
    let err = Model::load(&junk).err().unwrap();
    std::fs::remove_file(&junk).unwrap();
    assert_eq!(err.status, Status::BAD_MAGIC);

    let vocab = Model::load_with(
        model_path(),
        &ModelOptions {
            vocab_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(vocab.info().unwrap().vocab_only);
    assert!(Batcher::new(&vocab, &BatcherOptions::default()).is_err());
}

#[test]
fn chat_templates() {
    let msgs = [
        ChatMessage {
            role: "system",
            content: "Be brief.",
        },
        ChatMessage {
            role: "user",
            content: "Hi",
        },
    ];
    let opts = ChatOptions {
        add_assistant: true,
        ..Default::default()
    };
    assert_eq!(
        apply_chat_template("chatml", &msgs, opts).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let words = "word ".repeat(50);
    let long: Vec<ChatMessage> = (0..9)
        .map(|i| ChatMessage {
            role: if i % 2 == 0 { "user" } else { "assistant" },
            content: &words,
        })
        .collect();
    assert!(
        apply_chat_template("chatml", &long, ChatOptions::default())
            .unwrap()
            .len()
            > 2000
    );
    assert!(chat_families().contains(&"llama3"));
    let err = apply_chat_template("{% unknown %}", &msgs, opts).unwrap_err();
    assert_eq!(err.status, Status::BAD_TEMPLATE);
    let err = apply_chat_template(
        "chatml",
        &[ChatMessage {
            role: "robot",
            content: "x",
        }],
        opts,
    )
    .unwrap_err();
    assert_eq!(err.status, Status::INVALID_ARG);

    let m = model();
    let user = [ChatMessage {
        role: "user",
        content: "Hi",
    }];
    assert_eq!(
        m.apply_chat_template(Some("llama2"), &user, ChatOptions::default())
            .unwrap(),
        "[INST] Hi [/INST]"
    );
    // The synthetic model carries no template of its own.
    let err = m
        .apply_chat_template(None, &user, ChatOptions::default())
        .unwrap_err();
    assert_eq!(err.status, Status::MISSING);
    assert_eq!(m.chat_family(Some("zephyr")).unwrap(), "zephyr");
    let eos = m.special_token(SpecialToken::Eos).unwrap();
    assert!(m.chat_stop_tokens(Some("chatml")).unwrap().contains(&eos));
}

#[test]
fn rows_are_deterministic() {
    let m = model();
    let b = batcher(&m);
    let rows: Vec<Row> = ["Once upon a time", "The dragon said", "Once upon a time"]
        .iter()
        .map(|p| b.submit(&sampled(p, 12, 7)).unwrap())
        .collect();
    let other = b.submit(&sampled("Once upon a time", 12, 8)).unwrap();
    assert_eq!(b.pending(), 4);
    b.run().unwrap();
    assert_eq!(b.pending(), 0);
    let res: Vec<_> = rows.iter().map(|r| r.wait().unwrap()).collect();
    for c in &res {
        assert!(!c.text.is_empty());
        assert_eq!(c.usage.completion_tokens as usize, c.tokens.len());
    }
    assert_eq!(res[0].text, res[2].text);
    assert_eq!(res[0].tokens, res[2].tokens);
    assert_ne!(res[0].tokens, res[1].tokens);
    assert_ne!(res[0].tokens, other.wait().unwrap().tokens);
    let alone = batcher(&m)
        .submit(&sampled("Once upon a time", 12, 7))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(alone.text, res[0].text);
}

#[test]
fn rows_from_several_threads() {
    let m = model();
    let b = batcher(&m);
    let want: Vec<String> = (1..=4)
        .map(|s| {
            b.submit(&sampled("Once upon", 10, s))
                .unwrap()
                .wait()
                .unwrap()
                .text
        })
        .collect();
    let b = Arc::new(b);
    let handles: Vec<_> = (1..=4u64)
        .map(|s| {
            let b = b.clone();
            thread::spawn(move || {
                b.submit(&sampled("Once upon", 10, s))
                    .unwrap()
                    .wait()
                    .unwrap()
                    .text
            })
        })
        .collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, want);
}

#[test]
fn events_stream_in_order() {
    let m = model();
    let b = batcher(&m);
    let row = b
        .submit(
            &Request::text("Once upon a time")
                .max_tokens(8)
                .ignore_eos(true),
        )
        .unwrap();
    let events: Vec<Event> = row.events().map(|e| e.unwrap()).collect();
    let (last, texts) = events.split_last().unwrap();
    let done = match last {
        Event::Done(d) => d,
        e => panic!("last event {:?}", e),
    };
    assert_eq!(done.finish, Finish::Length);
    assert_eq!(done.tokens.len(), 8);
    let mut text = String::new();
    for e in texts {
        match e {
            Event::Text(t) => text.push_str(t),
            e => panic!("event {:?}", e),
        }
    }
    let pieces: Vec<u8> = done
        .tokens
        .iter()
        .flat_map(|&t| m.token_to_piece(t, false).unwrap())
        .collect();
    assert_eq!(text.as_bytes(), &pieces[..]);
    assert!(row.is_ended());
    assert!(row.next_event().unwrap().is_none());
}

#[test]
fn token_prompt_and_stop_strings() {
    let m = model();
    let b = batcher(&m);
    let full = b
        .submit(
            &Request::text("The dragon said")
                .max_tokens(16)
                .ignore_eos(true),
        )
        .unwrap()
        .wait()
        .unwrap();
    let toks = m.tokenize("The dragon said", true, false).unwrap();
    let by_ids = b
        .submit(&Request::tokens(toks).max_tokens(16).ignore_eos(true))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(by_ids.tokens, full.tokens);

    let chars: Vec<char> = full.text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let c = b
        .submit(
            &Request::text("The dragon said")
                .max_tokens(16)
                .ignore_eos(true)
                .stop(vec!["\u{1}never", &stop]),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(c.finish, Finish::Stop);
    assert_eq!(c.stop_index, 1);
    assert_eq!(c.text, full.text[..full.text.find(&stop).unwrap()]);
}

#[test]
fn sampling_options_and_logprobs() {
    let m = model();
    let b = batcher(&m);
    let banned = b
        .submit(&sampled("Once", 6, 3))
        .unwrap()
        .wait()
        .unwrap()
        .tokens[0];
    let c = b
        .submit(
            &sampled("Once", 6, 3)
                .logit_bias(banned, f32::NEG_INFINITY)
                .top_k(40)
                .top_p(0.95)
                .min_p(0.01)
                .typical_p(0.99)
                .repeat_penalty(1.1)
                .presence_penalty(0.1)
                .frequency_penalty(0.1)
                .penalty_last_n(16),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert!(!c.tokens.contains(&banned), "{:?} has {}", c.tokens, banned);

    let lp = b
        .submit(
            &Request::text("Once")
                .max_tokens(5)
                .n_logprobs(3)
                .ignore_eos(true),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(lp.logprobs.len(), 5);
    for (t, tok) in lp.logprobs.iter().zip(&lp.tokens) {
        assert_eq!(t.token, *tok);
        assert!(t.logprob <= 0.0);
        assert_eq!(t.top.len(), 3);
        assert!(t.top[0].1 >= t.top[1].1 && t.top[1].1 >= t.top[2].1);
    }
    let err = b
        .submit(
            &Request::text("Once")
                .max_tokens(4)
                .n_logprobs(sys::FX_MAX_LOGPROBS + 1),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);
}

#[test]
fn grammar_json_and_refusals() {
    let m = model();
    let b = batcher(&m);
    for seed in 0..3 {
        let c = b
            .submit(
                &Request::text("Answer:")
                    .max_tokens(8)
                    .temperature(1.0)
                    .seed(seed)
                    .grammar(r#"root ::= "yes" | "no""#),
            )
            .unwrap()
            .wait()
            .unwrap();
        assert!(c.text == "yes" || c.text == "no", "{:?}", c.text);
        assert_eq!(c.finish, Finish::Eos);
    }
    let c = b
        .submit(
            &Request::text("Answer:")
                .max_tokens(8)
                .grammar(r#"answer ::= "maybe""#)
                .grammar_root("answer"),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(c.text, "maybe");

    let err = b
        .submit(
            &Request::text("x")
                .max_tokens(4)
                .grammar(r#"root ::= "unterminated"#),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::GRAMMAR);
    assert!(err.message.contains("line 1"), "{}", err);

    let j = b
        .submit(
            &Request::text("Data:")
                .max_tokens(24)
                .temperature(0.7)
                .seed(11)
                .json(true),
        )
        .unwrap()
        .wait()
        .unwrap();
    let first = j.text.trim_start().chars().next().expect("json output");
    assert!("{[\"-0123456789tfn".contains(first), "{:?}", j.text);
    let err = b
        .submit(
            &Request::text("x")
                .max_tokens(4)
                .json(true)
                .grammar(r#"root ::= "a""#),
        )
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);

    let err = b
        .submit(&Request::text("Once upon a time").max_tokens(1000))
        .err()
        .unwrap();
    assert_eq!(err.status, Status::NO_ROOM);
    assert_eq!(b.pending(), 0);
}

#[test]
fn cancel() {
    let m = model();
    let b = batcher(&m);
    let row = b
        .submit(&Request::text("Once").max_tokens(200).ignore_eos(true))
        .unwrap();
    b.step().unwrap();
    b.step().unwrap();
    row.cancel().unwrap();
    row.cancel().unwrap();
    let c = row.wait().unwrap();
    assert_eq!(c.finish, Finish::Cancelled);
    assert!(c.usage.completion_tokens < 200);
    row.cancel().unwrap(); // after the end: nothing to do
}

#[test]
fn cancel_from_another_thread_while_stepping() {
    let m = model();
    let b = batcher(&m);
    let row = Arc::new(
        b.submit(&Request::text("Once").max_tokens(200).ignore_eos(true))
            .unwrap(),
    );
    let started = Arc::new(AtomicBool::new(false));
    let canceller = {
        let (row, started) = (row.clone(), started.clone());
        thread::spawn(move || {
            while !started.load(Ordering::Acquire) {
                thread::yield_now();
            }
            row.cancel().unwrap();
        })
    };
    let mut finish = None;
    for ev in row.events() {
        started.store(true, Ordering::Release);
        if let Event::Done(d) = ev.unwrap() {
            finish = Some(d.finish);
        }
    }
    canceller.join().unwrap();
    assert_eq!(finish, Some(Finish::Cancelled));
}

#[test]
fn release_twice_and_drop_order() {
    let m = model();
    let b = Batcher::new(
        &m,
        &BatcherOptions {
            n_ctx: Some(128),
            ..Default::default()
        },
    )
    .unwrap();
    drop(m); // the batcher keeps the model alive
    let row = b
        .submit(&Request::text("Once").max_tokens(50).ignore_eos(true))
        .unwrap();
    b.step().unwrap();
    row.release().unwrap();
    row.release().unwrap();
    assert!(row.is_ended());
    assert!(row.next_event().unwrap().is_none());
    assert_eq!(row.wait().unwrap_err().status, Status::STALE_HANDLE);
    b.step().unwrap();
    assert_eq!(b.pending(), 0);

    let done = b.submit(&Request::text("Once").max_tokens(2)).unwrap();
    done.wait().unwrap();
    done.release().unwrap(); // after Done: the handle is gone already

    // Dropping a running row releases it.
    drop(
        b.submit(&Request::text("Once").max_tokens(50).ignore_eos(true))
            .unwrap(),
    );
    b.step().unwrap();
    assert_eq!(b.pending(), 0);

    // A row outliving its Batcher value keeps the C batcher alive.
    let late = b.submit(&Request::text("Once").max_tokens(3)).unwrap();
    drop(b);
    assert_eq!(late.wait().unwrap().tokens.len(), 3);
    row.cancel().unwrap();
}

#[test]
fn lease() {
    let m = model();
    let b = batcher(&m);
    // Long enough for whole KV blocks (16 positions): those are pinned.
    let prefix = "You are a knight of the realm. You guard the northern gate, speak little and never leave your post.";
    let lease = b.lease(prefix, false, false).unwrap();
    assert_eq!(lease.state().unwrap(), LeaseState::Pending);
    for _ in 0..10 {
        if lease.is_ready() {
            break;
        }
        b.step().unwrap();
    }
    assert!(lease.is_ready());
    assert!(lease.is_pinned());
    assert_eq!(lease.state().unwrap(), LeaseState::Pinned);
    let suffix = m.tokenize(" Speak:", false, false).unwrap();
    let c = b
        .submit(&Request::tokens(suffix.clone()).max_tokens(6).lease(&lease))
        .unwrap()
        .wait()
        .unwrap();
    let mut whole = m.tokenize(prefix, true, false).unwrap();
    whole.extend_from_slice(&suffix);
    assert_eq!(c.usage.prompt_tokens as usize, whole.len());
    let plain = b
        .submit(&Request::tokens(whole).max_tokens(6))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(c.tokens, plain.tokens);
    lease.release().unwrap();
    lease.release().unwrap();
    assert_eq!(lease.state().unwrap_err().status, Status::STALE_HANDLE);
    let err = b
        .submit(&Request::tokens(suffix.clone()).max_tokens(2).lease(&lease))
        .err()
        .unwrap();
    assert_eq!(err.status, Status::STALE_HANDLE);
    let other = batcher(&m);
    let err = other
        .submit(&Request::tokens(suffix).max_tokens(2).lease(&lease))
        .err()
        .unwrap();
    assert_eq!(err.status, Status::INVALID_ARG);
    // A prefix shorter than one KV block is computed but not pinned.
    let short = b.lease("Hi", false, false).unwrap();
    b.run().unwrap();
    assert_eq!(short.state().unwrap(), LeaseState::Unpinned);
}

#[test]
fn metadata_and_tensors() {
    let m = model();
    let info = m.info().unwrap();
    let meta = m.metadata().unwrap();
    assert_eq!(meta.len() as u64, info.n_meta);
    assert_eq!(meta[0], ("general.architecture".to_string(), "\"llama\"".to_string()));
    let value = |k: &str| meta.iter().find(|e| e.0 == k).map(|e| e.1.clone()).unwrap();
    assert_eq!(value("llama.block_count"), "4");
    let toks = value("tokenizer.ggml.tokens");
    assert!(toks.starts_with("[string x 32000: \"<unk>\", \"<s>\", \"</s>\""), "{}", toks);
    let tensors = m.tensors().unwrap();
    assert_eq!(tensors.len() as u64, info.n_tensors);
    let emb = tensors.iter().find(|t| t.name == "token_embd.weight").expect("token_embd.weight");
    assert_eq!(emb.dims, [256, info.n_vocab as u64]);
    assert!(!emb.type_name.is_empty() && emb.n_bytes > 0, "{:?}", emb);
    for t in &tensors {
        assert!(t.offset + t.n_bytes <= info.file_size, "{:?}", t);
    }
}

#[test]
fn f16_kv_cache_is_deterministic() {
    let m = model();
    let mut texts = Vec::new();
    // alone, then beside another row
    for others in 0..2 {
        let b = Batcher::new(
            &m,
            &BatcherOptions {
                n_ctx: Some(256),
                kv_f16: true,
                ..Default::default()
            },
        )
        .unwrap();
        let row = b.submit(&sampled("Once upon", 12, 7)).unwrap();
        let _other = if others > 0 {
            Some(b.submit(&sampled("The dragon said", 12, 8)).unwrap())
        } else {
            None
        };
        texts.push(row.wait().unwrap().text);
    }
    assert!(!texts[0].is_empty());
    assert_eq!(texts[0], texts[1]);
}

#[test]
fn mapped_weights_give_the_same_tokens() {
    let mut texts = Vec::new();
    // copied over the first steps, mapped, copied at once
    for (mapped, eager) in [(false, false), (true, false), (false, true)] {
        let m = Model::load_with(
            model_path(),
            &ModelOptions {
                mapped_weights: mapped,
                eager_copy: eager,
                ..Default::default()
            },
        )
        .unwrap();
        let b = batcher(&m);
        let c = b.submit(&sampled("Once upon", 12, 7)).unwrap().wait().unwrap();
        texts.push(c.text);
    }
    assert!(!texts[0].is_empty());
    assert_eq!(texts[0], texts[1]);
    assert_eq!(texts[0], texts[2]);
}
