//! `--prompt-cache DIR`: restore the saved conversation that shares the longest prefix with
//! the prompt before generating, save the conversation after.

use std::time::Instant;

use wick::prompt_cache::CacheDir;
use wick::source::FileSource;
use wick::{Error, Result, Session};

use super::PromptCacheArgs;

/// The cache directory the flags name, if any.
pub fn dir(a: &PromptCacheArgs) -> Result<Option<CacheDir>> {
    let Some(path) = &a.prompt_cache else { return Ok(None) };
    if !(a.prompt_cache_max.is_finite() && a.prompt_cache_max > 0.0) {
        return Err(Error::InvalidArgument(format!(
            "--prompt-cache-max {}: a positive number of GiB",
            a.prompt_cache_max
        )));
    }
    Ok(Some(CacheDir::new(path, (a.prompt_cache_max * (1u64 << 30) as f64) as u64)))
}

/// Start `session` from the saved cache that shares the most tokens with `prompt`. A cache
/// that fails its checks is reported, removed and ignored: the prompt is then evaluated whole.
pub async fn restore(dir: &CacheDir, session: &mut Session<'_>, prompt: &[u32]) {
    let digest = session.model().digest();
    let Some(found) = dir.best(&digest, prompt) else { return };
    let t0 = Instant::now();
    let restored = match FileSource::open(&found.path).await {
        Ok(src) => session.restore_prompt_cache_from(src, prompt).await,
        Err(e) => Err(e),
    };
    match restored {
        Ok(n) => {
            dir.touch(&found.path);
            eprintln!(
                "prompt cache: {n} of {} prompt tokens restored from {} in {:.3} s",
                prompt.len(),
                found.path.display(),
                t0.elapsed().as_secs_f64()
            )
        }
        Err(e) => {
            eprintln!("warning: {e} ({}); ignoring it", found.path.display());
            if matches!(e, Error::PromptCache(_)) {
                dir.remove(&found.path);
            }
        }
    }
}

/// Save the session's conversation; a failure is a warning (the reply is already out).
pub async fn save(dir: &CacheDir, session: &Session<'_>) {
    if session.tokens().is_empty() {
        return;
    }
    let t0 = Instant::now();
    let saved = async {
        let mut pending = dir.begin(&session.model().digest(), session.tokens())?;
        let n = session.save_prompt_cache_to(|b| std::future::ready(pending.write(&b))).await?;
        Ok::<_, Error>((dir.commit(pending)?, n))
    };
    match saved.await {
        Ok((path, n)) => eprintln!(
            "prompt cache: {} tokens saved to {} ({:.1} MiB, {:.3} s)",
            session.tokens().len(),
            path.display(),
            n as f64 / (1 << 20) as f64,
            t0.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("warning: saving the prompt cache failed: {e}"),
    }
}
