#!/usr/bin/env bash
# Build the tokenizer, chat_template and model_load fuzz targets and pack them, with their
# corpora and run.sh, into .fz/ (git-ignored) for a long run on another x86-64 Linux machine
# (issue 16's ten million executions a target), e.g. the device machine:
#
#   bash fuzz/long/pack.sh            # here: nightly + cargo-fuzz, as .ci/fuzz installs them
#   bash .fz/run.sh 540               # there: see run.sh; about 16 MB travels
#
# A corpus grown by an earlier run (run.sh copies it to $OUT) can replace the seeds:
# FZ_CORPUS=DIR takes DIR/<target>/ where present.
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(tokenizer chat_template model_load)
mkdir -p .fz
grep -qx '/.fz/' .git/info/exclude 2>/dev/null || echo '/.fz/' >>.git/info/exclude
bin="${CARGO_TARGET_DIR:-$PWD/fuzz/target}"
[ -n "${CARGO_TARGET_DIR:-}" ] && bin="$CARGO_TARGET_DIR/fuzz"
(cd fuzz && for t in "${targets[@]}"; do CARGO_TARGET_DIR="$bin" cargo +nightly fuzz build -O "$t"; done)
for t in "${targets[@]}"; do
  strip -o ".fz/$t" "$bin/x86_64-unknown-linux-gnu/release/$t"
  gzip -f ".fz/$t"
  src="fuzz/corpus/$t"
  [ -n "${FZ_CORPUS:-}" ] && [ -d "$FZ_CORPUS/$t" ] && src="$FZ_CORPUS/$t"
  tar -czf ".fz/corpus-$t.tar.gz" -C "$src" .
done
cp fuzz/long/run.sh .fz/run.sh
echo "built $(git rev-parse --short HEAD) $(date -u +%FT%TZ)" >.fz/BUILD
du -sh .fz
