//! Saved prompt caches in a directory (native; `wick --prompt-cache DIR`): one file per saved
//! conversation under a folder per model digest, the least recently used removed past a size
//! cap.
//!
//! ```text
//! DIR/<model digest>/<digest of the tokens>.wkv
//! ```
//!
//! Files are written to a temporary name and renamed, so a crash mid-write leaves no partial
//! cache under a real name. A save removes the model's caches whose tokens it extends (a
//! conversation's earlier snapshots).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{header_needs, read_header_of, CacheHeader, HEADER_MIN};
use crate::digest::{hex, Fnv128};
use crate::{Error, Result};

const EXT: &str = "wkv";

/// A directory of saved prompt caches.
#[derive(Debug, Clone)]
pub struct CacheDir {
    root: PathBuf,
    max_bytes: u64,
}

/// A saved cache that matches a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its file.
    pub path: PathBuf,
    /// Tokens it shares with the prompt (from the start).
    pub common: usize,
    /// Tokens it holds.
    pub n_tokens: usize,
}

impl CacheDir {
    /// The caches in `root` (created on the first save), at most `max_bytes` in all.
    pub fn new(root: impl Into<PathBuf>, max_bytes: u64) -> CacheDir {
        CacheDir { root: root.into(), max_bytes }
    }

    fn model_dir(&self, digest: &[u8; 16]) -> PathBuf {
        self.root.join(hex(digest))
    }

    /// The saved caches of a model, with their headers; unreadable files are skipped.
    fn list(&self, digest: &[u8; 16]) -> Vec<(PathBuf, CacheHeader)> {
        let Ok(entries) = fs::read_dir(self.model_dir(digest)) else { return Vec::new() };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == EXT))
            .filter_map(|p| read_file_header(&p).ok().map(|h| (p, h)))
            .filter(|(_, h)| &h.digest == digest)
            .collect()
    }

    /// Of the model's saved caches, the one that shares the longest prefix with `prompt` (at
    /// least one token).
    pub fn best(&self, digest: &[u8; 16], prompt: &[u32]) -> Option<Found> {
        self.list(digest)
            .into_iter()
            .map(|(path, h)| {
                let common = h.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                Found { path, common, n_tokens: h.tokens.len() }
            })
            .filter(|f| f.common > 0)
            .max_by_key(|f| (f.common, std::cmp::Reverse(f.n_tokens)))
    }

    /// Mark a saved cache used now (the eviction order is least recently used first).
    pub fn touch(&self, path: &Path) {
        if let Ok(f) = fs::File::options().append(true).open(path) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    /// Remove a saved cache (one that was rejected).
    pub fn remove(&self, path: &Path) {
        let _ = fs::remove_file(path);
    }

    /// Start saving a cache of `tokens`: write its bytes with [`PendingSave::write`], then
    /// [`CacheDir::commit`]. Dropped uncommitted, it leaves nothing behind.
    pub fn begin(&self, digest: &[u8; 16], tokens: &[u32]) -> Result<PendingSave> {
        let dir = self.model_dir(digest);
        fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let mut h = Fnv128::default();
        tokens.iter().for_each(|t| h.update(&t.to_le_bytes()));
        let path = dir.join(format!("{}.{EXT}", &hex(&h.finish())[..20]));
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let file = fs::File::create(&tmp).map_err(|e| Error::io(format!("creating {}", tmp.display()), e))?;
        Ok(PendingSave {
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            tmp,
            path,
            digest: *digest,
            tokens: tokens.to_vec(),
        })
    }

    /// Finish a save: the file takes its name, the model's caches whose tokens it extends
    /// are removed, then the least recently used caches of any model until the directory is
    /// within its cap. Returns the file.
    pub fn commit(&self, mut p: PendingSave) -> Result<PathBuf> {
        let path = p.path.clone();
        let io = |e: std::io::Error| Error::io(format!("writing {}", path.display()), e);
        let file = p.file.take().ok_or_else(|| Error::PromptCache("save already committed".into()))?;
        file.into_inner().map_err(|e| io(e.into_error()))?;
        for (old, header) in self.list(&p.digest) {
            if old != path && p.tokens.starts_with(&header.tokens) {
                let _ = fs::remove_file(old);
            }
        }
        fs::rename(&p.tmp, &path).map_err(io)?;
        self.evict(&path);
        Ok(path)
    }

    /// Save `bytes`, a whole cache of `tokens` ([`CacheDir::begin`] and [`CacheDir::commit`]).
    pub fn save(&self, digest: &[u8; 16], tokens: &[u32], bytes: &[u8]) -> Result<PathBuf> {
        let mut p = self.begin(digest, tokens)?;
        p.write(bytes)?;
        self.commit(p)
    }

    /// Remove the least recently used caches (never `keep`) until the directory fits its cap.
    fn evict(&self, keep: &Path) {
        let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for d in fs::read_dir(&self.root).into_iter().flatten().flatten() {
            for f in fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let p = f.path();
                if p.extension().is_some_and(|x| x == EXT) {
                    if let Ok(m) = f.metadata() {
                        files.push((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), p));
                    }
                }
            }
        }
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, p) in files {
            if total <= self.max_bytes {
                break;
            }
            if p != keep && fs::remove_file(&p).is_ok() {
                total -= len;
            }
        }
    }
}

/// A cache being written ([`CacheDir::begin`]): a temporary file until [`CacheDir::commit`].
pub struct PendingSave {
    file: Option<std::io::BufWriter<fs::File>>,
    tmp: PathBuf,
    path: PathBuf,
    digest: [u8; 16],
    tokens: Vec<u32>,
}

impl PendingSave {
    /// Append `bytes` (the pieces [`crate::Session::save_prompt_cache_to`] hands out).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let f = self.file.as_mut().ok_or_else(|| Error::PromptCache("save already committed".into()))?;
        f.write_all(bytes).map_err(|e| Error::io(format!("writing {}", self.tmp.display()), e))
    }
}

impl Drop for PendingSave {
    fn drop(&mut self) {
        if self.file.take().is_some() || self.tmp.exists() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The header of a saved cache file, reading only the header's bytes.
fn read_file_header(path: &Path) -> Result<CacheHeader> {
    let io = |e: std::io::Error| Error::io(format!("reading {}", path.display()), e);
    let mut f = fs::File::open(path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len() as usize;
    let mut head = Vec::new();
    let mut n = Some(HEADER_MIN);
    while let Some(need) = n {
        if need > file_len {
            return Err(Error::PromptCache(format!("{}: truncated header", path.display())));
        }
        let at = head.len();
        head.resize(need, 0);
        f.read_exact(&mut head[at..]).map_err(io)?;
        n = header_needs(&head, file_len)?;
    }
    Ok(read_header_of(&head, file_len)?.0)
}

#[cfg(test)]
mod tests {
    use super::super::encode;
    use super::*;

    fn cache(tokens: &[u32]) -> Vec<u8> {
        let h = CacheHeader { digest: [1; 16], k_dims: vec![2], v_dims: vec![2], tokens: tokens.to_vec() };
        let payload = vec![3u8; h.payload_bytes()];
        encode(&h, &payload).unwrap()
    }

    #[test]
    fn best_match_extension_and_eviction() {
        let root = std::env::temp_dir().join(format!("wick-cachedir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dir = CacheDir::new(&root, 1 << 20);
        let d = [1u8; 16];
        let a: Vec<u32> = (0..100).collect();
        let pa = dir.save(&d, &a, &cache(&a)).unwrap();
        // The longest common prefix wins; a cache sharing nothing is no match.
        let mut prompt: Vec<u32> = (0..50).collect();
        prompt.push(999);
        assert_eq!(dir.best(&d, &prompt), Some(Found { path: pa.clone(), common: 50, n_tokens: 100 }));
        assert_eq!(dir.best(&d, &[5, 6]), None);
        assert_eq!(dir.best(&[2; 16], &prompt), None);
        // A save that extends a cache replaces it.
        let b: Vec<u32> = (0..150).collect();
        let pb = dir.save(&d, &b, &cache(&b)).unwrap();
        assert!(!pa.exists() && pb.exists());
        // Another branch of the conversation stays beside it.
        let mut c: Vec<u32> = (0..60).collect();
        c.push(7);
        let pc = dir.save(&d, &c, &cache(&c)).unwrap();
        assert!(pb.exists() && pc.exists());
        assert_eq!(dir.best(&d, &b).map(|f| f.common), Some(150));
        // A cap below two files keeps only the newest.
        let small = CacheDir::new(&root, fs::metadata(&pc).unwrap().len() + 10);
        let e: Vec<u32> = (500..520).collect();
        let pe = small.save(&d, &e, &cache(&e)).unwrap();
        assert!(pe.exists());
        assert_eq!([&pb, &pc].iter().filter(|p| p.exists()).count(), 0, "older caches evicted");
        // Unreadable files are skipped.
        fs::write(root.join(hex(&d)).join("junk.wkv"), b"WICKKVC\0xx").unwrap();
        assert_eq!(dir.best(&d, &e).map(|f| f.common), Some(20));
        let _ = fs::remove_dir_all(&root);
    }
}
