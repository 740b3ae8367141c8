#!/usr/bin/env bash
# RUSTFLAGS of the threaded wasm build (pkg-config/build.sh; .ci/run's clippy of it): atomics
# and a shared memory of at most 4 GiB, imported so that Web Workers can share it, with the
# TLS symbols wasm-bindgen's thread support needs. RUSTFLAGS replaces .cargo/config.toml's
# flags, so simd128 is named again. Prints the flags; with the argument `relaxed`, those of the
# relaxed-SIMD twin (build.sh).
link="-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296"
for sym in __wasm_init_tls __tls_size __tls_align __tls_base; do link="$link -C link-arg=--export=$sym"; done
simd="+simd128"
[ "${1:-}" = relaxed ] && simd="+simd128,+relaxed-simd"
echo "-C target-feature=+atomics,+bulk-memory,+mutable-globals,$simd $link"
