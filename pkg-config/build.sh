#!/usr/bin/env bash
# Build the npm package `wick-llm` into pkg/ (or $1): wasm-pack compiles the crate for the
# browser (--target web, the `webgpu` feature, no CLI), then this script adds the hand-written
# ESM layer (pkg-config/js/), its TypeScript types, the npm README and a package.json whose
# version is the crate's. The result is what `npm publish pkg/` would publish.
#
#   bash pkg-config/build.sh            # release build into pkg/
#   WICK_WASM_PROFILE=dev bash pkg-config/build.sh   # faster, larger, slower at run time
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/pkg}"
profile="${WICK_WASM_PROFILE:-release}"
raw="$root/target/wasm-pack"

cd "$root"
wasm-pack build --"$profile" --target web --no-typescript --no-pack --out-dir "$raw" --out-name wick \
  . --no-default-features --features webgpu
# (wasm-pack's own .d.ts is replaced by index.d.ts, which types the whole public API.)

# Each build again with relaxed SIMD (the CPU kernels' integer dot products in one instruction;
# src/quant/simd128.rs), for engines that validate it (pkg-config/js/threads.js picks):
# wick_relaxed_bg.wasm and wick_mt_relaxed_bg.wasm. They share the first builds' JS glue, which
# must therefore be the same code (only comments may differ: checked below).
# WICK_WASM_RELAXED=0 skips them (the package then loads the simd128 files everywhere).
relaxed="${WICK_WASM_RELAXED:-1}"
same_glue() {
  if ! cmp -s <(grep -v '^ *//' "$1") <(grep -v '^ *//' "$2"); then
    echo "build.sh: the relaxed-SIMD build's glue differs from the simd128 one's ($1, $2)" >&2
    exit 1
  fi
}
raw_relaxed="$root/target/wasm-pack-relaxed"
if [ "$relaxed" != 0 ]; then
  RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR="$root/target/wasm-relaxed" \
    wasm-pack build --"$profile" --target web --no-typescript --no-pack --out-dir "$raw_relaxed" --out-name wick \
    . --no-default-features --features webgpu
  same_glue "$raw/wick.js" "$raw_relaxed/wick.js"
fi

# The threaded build (wick_mt.js, for cross-origin isolated pages; pkg-config/js/threads.js):
# the same crate with atomics and a shared memory of at most 4 GiB, which needs std rebuilt
# with atomics (nightly's -Z build-std, and its rust-src; flags in mt-rustflags.sh). wasm-bindgen
# (Cargo.lock's version, as wasm-pack uses) adds the per-thread stacks. WICK_WASM_THREADS=0
# skips it (the package then runs one thread).
mt="$root/target/wasm-mt"
if [ "${WICK_WASM_THREADS:-1}" != 0 ]; then
  if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain nightly
  fi
  RUSTFLAGS="$(bash pkg-config/mt-rustflags.sh)" \
    cargo +nightly build --quiet --target wasm32-unknown-unknown -Z build-std=std,panic_abort \
    --profile "$profile" --lib --no-default-features --features webgpu --target-dir "$mt"
  dir="$([ "$profile" = dev ] && echo debug || echo release)"
  wasm-bindgen --target web --no-typescript --out-dir "$mt/bindgen" --out-name wick_mt \
    "$mt/wasm32-unknown-unknown/$dir/wick.wasm"
  if [ "$relaxed" != 0 ]; then
    mtr="$root/target/wasm-mt-relaxed"
    RUSTFLAGS="$(bash pkg-config/mt-rustflags.sh relaxed)" \
      cargo +nightly build --quiet --target wasm32-unknown-unknown -Z build-std=std,panic_abort \
      --profile "$profile" --lib --no-default-features --features webgpu --target-dir "$mtr"
    wasm-bindgen --target web --no-typescript --out-dir "$mtr/bindgen" --out-name wick_mt \
      "$mtr/wasm32-unknown-unknown/$dir/wick.wasm"
    same_glue "$mt/bindgen/wick_mt.js" "$mtr/bindgen/wick_mt.js"
  fi
fi

rm -rf "$out"
mkdir -p "$out/wasm"
cp "$raw/wick.js" "$raw/wick_bg.wasm" "$out/wasm/"
if [ "${WICK_WASM_THREADS:-1}" != 0 ]; then cp "$mt/bindgen/wick_mt.js" "$mt/bindgen/wick_mt_bg.wasm" "$out/wasm/"; fi
if [ "$relaxed" != 0 ]; then
  cp "$raw_relaxed/wick_bg.wasm" "$out/wasm/wick_relaxed_bg.wasm"
  if [ "${WICK_WASM_THREADS:-1}" != 0 ]; then cp "$mtr/bindgen/wick_mt_bg.wasm" "$out/wasm/wick_mt_relaxed_bg.wasm"; fi
fi
cp pkg-config/js/*.js pkg-config/js/*.d.ts "$out/"
cp pkg-config/README.md "$out/README.md"
version="$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)"
node -e '
  const fs = require("fs");
  const [tpl, out, version] = process.argv.slice(1);
  const p = JSON.parse(fs.readFileSync(tpl, "utf8"));
  p.version = version;
  fs.writeFileSync(out + "/package.json", JSON.stringify(p, null, 2) + "\n");
' pkg-config/package.json "$out" "$version"
echo "built $out ($(du -sh "$out/wasm/wick_bg.wasm" | cut -f1) of wasm, version $version)"
