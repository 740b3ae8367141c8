//! Fuzz the streaming GGUF reader: any bytes must give `Ok` or `Err`, never a panic, a hang or a
//! runaway allocation. The first byte picks the source kind (length known or not) and chunk size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::gguf::GgufReader;
use wick::source::{ByteSource, MemorySource};
use wick::Result;

/// A source that does not know its length (like a stream without Content-Length) and hands out
/// bytes in small pieces, so the length-unknown paths of the reader are fuzzed too.
struct Unsized<'a>(MemorySource<&'a [u8]>, usize);

impl ByteSource for Unsized<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = buf.len().min(self.1);
        self.0.read(&mut buf[..n]).await
    }
}

async fn drain<S: ByteSource>(src: S, chunk: usize) {
    let Ok(mut r) = GgufReader::open(src).await else { return };
    r.set_chunk_size(chunk);
    while let Ok(Some(_)) = r.next_chunk().await {}
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let chunk = 4 + 4 * (mode as usize >> 1);
    pollster::block_on(async {
        if mode & 1 == 0 {
            drain(MemorySource::new(rest), chunk).await
        } else {
            drain(Unsized(MemorySource::new(rest), 1 + mode as usize), chunk).await
        }
    });
});
