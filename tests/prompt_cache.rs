//! Prompt caches (issue 18): a conversation's KV saved as bytes and restored into a new
//! session continues exactly as if it had never stopped (the same greedy tokens, only the new
//! tokens evaluated); the longest common prefix with a new prompt is what is reused; a
//! truncated, tampered or foreign cache is rejected and the session stays usable; the model's
//! digest is the same at every load of one file and differs between files; `wick generate
//! --prompt-cache DIR` restores on its second run. CPU executor, SmolLM2 and Gemma 3.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::process::Command;

use support::block_on;
use support::models::*;
use wick::sampling::SamplingParams;
use wick::{Error, GenerateOptions, Session};

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, sampling: SamplingParams::greedy(), ignore_eog: true, ..Default::default() }
}

/// Generate greedily; returns the generated ids and how many prompt tokens were evaluated.
fn run(session: &mut Session<'_>, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    block_on(async {
        let mut gen = session.generate(prompt, greedy(n)).expect("generate");
        let evaluated = gen.n_prompt_evaluated();
        let mut ids = Vec::new();
        while let Some(t) = gen.next().await {
            ids.extend(t.expect("token").id);
        }
        (ids, evaluated)
    })
}

fn encode(model: &wick::Model, text: &str, bos: bool) -> Vec<u32> {
    model.tokenizer().encode(text, bos, true).expect("encode")
}

#[test]
fn restored_conversation_continues_as_if_never_stopped() {
    let model = load_cpu(SMOLLM2);
    let opts = wick::SessionOptions { n_ctx: 512, ..Default::default() };
    let prompt = encode(&model, "The history of the lighthouse at Alexandria begins", true);
    let mut a = model.session(opts.clone()).unwrap();
    let (first, _) = run(&mut a, &prompt, 70);
    let mut history = prompt.clone();
    history.extend(&first);
    // The cache holds every token but the last generated one (not evaluated yet).
    assert_eq!(a.tokens(), &history[..history.len() - 1]);
    let saved = block_on(a.save_prompt_cache()).expect("save");

    // The next turn, in the session that never stopped.
    let mut next = history.clone();
    next.extend(encode(&model, " Later, travellers wrote that", false));
    let (want, evaluated_a) = run(&mut a, &next, 40);

    // The same turn in a new session restored from the saved bytes.
    let mut b = model.session(opts).unwrap();
    let restored = block_on(b.restore_prompt_cache(&saved, &next)).expect("restore");
    assert_eq!(restored, history.len() - 1);
    let (got, evaluated_b) = run(&mut b, &next, 40);
    assert_eq!(evaluated_b, evaluated_a, "only the new tokens are evaluated");
    assert_eq!(evaluated_b, next.len() - restored);
    assert_eq!(got, want, "restored session's tokens differ from the uninterrupted one's");
}

#[test]
fn the_longest_common_prefix_is_reused() {
    let model = load_cpu(SMOLLM2);
    let opts = wick::SessionOptions { n_ctx: 512, ..Default::default() };
    let text = "A long system prompt that many conversations share: be brief, be kind, cite sources, \
                and answer in English. The user asks about rivers, mountains and the sea.";
    let shared = encode(&model, text, true);
    let mut a = model.session(opts.clone()).unwrap();
    let mut first = shared.clone();
    first.extend(encode(&model, " First question: why is the sea salty?", false));
    run(&mut a, &first, 8);
    let saved = block_on(a.save_prompt_cache()).expect("save");

    // A prompt that leaves the saved tokens after the shared part (not on a block boundary).
    let mut second = shared.clone();
    second.extend(encode(&model, " Second question: how do rivers form?", false));
    let common = first.iter().zip(&second).take_while(|(x, y)| x == y).count();
    assert!(common >= shared.len() && common < first.len());
    let mut b = model.session(opts).unwrap();
    assert_eq!(block_on(b.restore_prompt_cache(&saved, &second)).unwrap(), common);
    let (got, evaluated) = run(&mut b, &second, 16);
    assert_eq!(evaluated, second.len() - common);
    // Session `a` reuses the same prefix from its own cache: the same computation.
    let (want, _) = run(&mut a, &second, 16);
    assert_eq!(got, want);

    // An empty prompt restores everything; a cache longer than the context keeps n_ctx - 1.
    let mut c = model.session(wick::SessionOptions { n_ctx: 32, ..Default::default() }).unwrap();
    assert!(a.tokens().len() > 32);
    assert_eq!(block_on(c.restore_prompt_cache(&block_on(a.save_prompt_cache()).unwrap(), &[])).unwrap(), 31);
    assert_eq!(c.tokens(), &a.tokens()[..31]);
}

#[test]
fn bad_caches_are_rejected_and_the_session_stays_usable() {
    let model = load_cpu(SMOLLM2);
    let opts = wick::SessionOptions { n_ctx: 256, ..Default::default() };
    let prompt = encode(&model, "Rivers carry salt to the sea, and", true);
    let mut a = model.session(opts.clone()).unwrap();
    let (want, _) = run(&mut a, &prompt, 12);
    let saved = block_on(a.save_prompt_cache()).unwrap();

    let mut b = model.session(opts).unwrap();
    let rejected = |b: &mut Session<'_>, bytes: &[u8], what: &str| {
        let e = block_on(b.restore_prompt_cache(bytes, &prompt)).expect_err(what);
        assert!(matches!(e, Error::PromptCache(_)), "{what}: {e}");
        assert!(b.tokens().is_empty(), "{what}: the session is left empty");
    };
    rejected(&mut b, &saved[..saved.len() / 2], "truncated");
    rejected(&mut b, &saved[..40], "truncated in the header");
    rejected(&mut b, b"not a cache at all", "garbage");
    let mut tampered = saved.clone();
    let mid = tampered.len() / 2;
    tampered[mid] ^= 0x04;
    rejected(&mut b, &tampered, "a flipped bit in the payload");
    let mut tampered = saved.clone();
    tampered[8] = 9;
    rejected(&mut b, &tampered, "another format version");

    // Another model's session refuses it (digest and shapes).
    let gemma = load_cpu(GEMMA3);
    let mut g = gemma.session(wick::SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let e = block_on(g.restore_prompt_cache(&saved, &[])).expect_err("another model");
    assert!(e.to_string().contains("another model"), "{e}");

    // After every rejection the session generates what a fresh one does.
    let (got, evaluated) = run(&mut b, &prompt, 12);
    assert_eq!(evaluated, prompt.len());
    assert_eq!(got, want);
}

#[test]
fn digest_is_stable_per_file_and_differs_between_files() {
    let a = load_cpu(SMOLLM2).digest();
    assert_eq!(a, load_cpu(SMOLLM2).digest());
    assert_ne!(a, load_cpu(GEMMA3).digest());
}

#[test]
fn cli_restores_on_its_second_run() {
    let dir = std::env::temp_dir().join(format!("wick-prompt-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let model = model_path(SMOLLM2);
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(["generate", "-m", model.to_str().unwrap(), "--executor", "cpu", "--no-progress"])
            .args(["-p", "The three largest rivers of Europe are", "-n", "12", "--temp", "0"])
            .args(["--prompt-cache", dir.to_str().unwrap()])
            .output()
            .expect("run wick");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let (first, err1) = run();
    assert!(err1.contains("tokens saved to"), "{err1}");
    assert!(!err1.contains("restored"), "{err1}");
    let (second, err2) = run();
    assert!(err2.contains("prompt tokens restored"), "{err2}");
    assert!(err2.contains("prompt: 1 tokens"), "only the last prompt token is evaluated:\n{err2}");
    assert_eq!(first, second);
    // A corrupt cache is reported, removed and ignored.
    let file = std::fs::read_dir(std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "wkv"))
        .expect("a saved cache");
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let (third, err3) = run();
    assert!(err3.contains("warning: prompt cache rejected"), "{err3}");
    assert_eq!(first, third);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A source that hands out at most 1000 bytes a read and does not know its length (a network
/// stream): restoring from it must give what restoring from memory gives, and a truncated or
/// overlong stream is caught without a length to compare with.
struct Dribble<'a>(&'a [u8]);

impl wick::source::ByteSource for Dribble<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> wick::Result<usize> {
        let n = buf.len().min(self.0.len()).min(1000);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn restores_from_a_stream_of_small_reads() {
    let model = load_cpu(SMOLLM2);
    let opts = wick::SessionOptions { n_ctx: 256, ..Default::default() };
    let prompt = encode(&model, "Small pieces: the cache arrives a thousand bytes at a time, and", true);
    let mut a = model.session(opts.clone()).unwrap();
    run(&mut a, &prompt, 70);
    let saved = block_on(a.save_prompt_cache()).unwrap();
    let mut b = model.session(opts).unwrap();
    let n = block_on(b.restore_prompt_cache_from(Dribble(&saved), &[])).expect("restore");
    assert_eq!((n, b.tokens()), (a.tokens().len(), a.tokens()));
    let (want, _) = run(&mut a, &prompt, 5);
    let (got, _) = run(&mut b, &prompt, 5);
    assert_eq!(got, want);
    // Truncated by one byte, or one byte too long: rejected, the session left empty.
    for bytes in [&saved[..saved.len() - 1], &[&saved[..], &[0u8][..]].concat()[..]] {
        let e = block_on(b.restore_prompt_cache_from(Dribble(bytes), &[])).expect_err("bad length");
        assert!(matches!(e, Error::PromptCache(_)), "{e}");
        assert!(b.tokens().is_empty());
    }
}
