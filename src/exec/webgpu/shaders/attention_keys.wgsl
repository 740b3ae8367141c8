// What the attention kernels share (attention_split, attention_combine, attention_tiled): the
// keys a query sees, its scores, how a decode step's keys are cut into splits, and the reads of
// four f16 of the KV cache. KV4 / KV4F: the cache read as four f16 (`vec4<f16>` with
// `shader-f16`, else two u32) and their conversion to vec4<f32>.

// A masked score (finite: Tint rejects literals beyond f32's range); real scores are far above.
const NEG: f32 = -3.0e38;
// A split of a decode step takes at least this many keys (a multiple of 64, the key tile).
const SPLIT_MIN: u32 = 64u;

// The first key a query at position `pos` sees (a sliding window keeps keys > pos - window);
// the last is `pos`.
fn keys_from(pos: u32) -> u32 {
    if (p.window > 0u && pos + 1u > p.window) {
        return pos + 1u - p.window;
    }
    return 0u;
}

// The first key of a decode row's splits (attention_split.wgsl, attention_combine.wgsl):
// keys_from(pos) rounded down to a whole tile of 64 keys, so that every tile lies in one block
// of the cache (KV_BLOCK = 64); the keys before keys_from(pos) are masked.
fn split_from(pos: u32) -> u32 {
    return keys_from(pos) / 64u * 64u;
}

// The score of a dot product of a query and a key: scaled, then soft-capped.
fn score_of(d: f32) -> f32 {
    var v = d * p.scale;
    if (p.softcap > 0.0) {
        v = tanh(v / p.softcap) * p.softcap;
    }
    return v;
}

// Keys per split when a row sees `n` keys: n over the splits, rounded up to whole key tiles,
// at least SPLIT_MIN (so a short context uses few splits).
fn split_len(n: u32) -> u32 {
    let c = (n + p.splits - 1u) / p.splits;
    return max(SPLIT_MIN, (c + 63u) / 64u * 64u);
}

// Four cache values at vec4 index i (i * 4 is the element index).
fn kv4(x: {{KV4}}) -> vec4<f32> {
    return {{KV4F}};
}
