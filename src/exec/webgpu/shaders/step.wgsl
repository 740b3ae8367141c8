// The step's inputs (exec/step.rs `StepLayout`), read from the `step` binding of the kernels
// composed with this file; `p.n_tok` and `p.n_seq` are the graph's tokens and most sequences:
// tokens[n_tok] | positions[n_tok] | seq_of[n_tok] | seq_start[S+1] | seq_len[S] | last[S] |
// n_seqs[1] | tables[S × T]. The binding is sized for the KV cache it is bound with
// (record.rs `bind_kv`), so the table stride T is what follows the fixed words, over S.

// Position of token row r in its sequence.
fn step_pos(r: u32) -> u32 {
    return step[p.n_tok + r];
}

// Sequence of token row r.
fn step_seq(r: u32) -> u32 {
    return step[2u * p.n_tok + r];
}

// First token row of sequence s (s ≤ S; = n_tok past the step's sequences).
fn step_start(s: u32) -> u32 {
    return step[3u * p.n_tok + s];
}

// Last token row of sequence s (past the step's sequences: the step's last row).
fn step_last(s: u32) -> u32 {
    return step[3u * p.n_tok + 2u * p.n_seq + 1u + s];
}

// Sequences of this step.
fn step_count() -> u32 {
    return step[3u * p.n_tok + 3u * p.n_seq + 1u];
}

// The pool block holding block b (positions 64 b .. 64 b + 63) of sequence s.
fn step_block(s: u32, b: u32) -> u32 {
    let tables = 3u * p.n_tok + 3u * p.n_seq + 2u;
    let stride = (arrayLength(&step) - tables) / p.n_seq;
    return step[tables + s * stride + b];
}

// The cache row of position `pos` of sequence s (KV_BLOCK = 64 positions per block).
fn kv_row(s: u32, pos: u32) -> u32 {
    return step_block(s, pos / 64u) * 64u + pos % 64u;
}
