#!/usr/bin/env bash
# A long fuzz run of wick's tokenizer, chat_template and model_load targets on a Linux x86-64
# machine without Rust or internet (issue 16). Run from the repository root:
#
#   bash .fz/run.sh [SECONDS] [WORKERS]     (defaults: 540 s, all of nproc)
#
# .fz/ is made by fuzz/long/pack.sh (binaries, corpora and this script; git-ignored).
#
# Unpacks the fuzz binaries (built on Debian 12 with `cargo +nightly fuzz build -O`, debug
# info stripped; glibc >= 2.34) and their corpora under /root/fz (or $FZ_ROOT), then fuzzes
# the three targets at once for SECONDS of wall time: WORKERS libFuzzer processes spread
# evenly over the targets (chat_template, the slowest, gets the rest), each worker of a target
# sharing the target's corpus folder (libFuzzer reloads it, as -jobs/-workers does). A worker
# that stops early (a crash, a timeout, an out-of-memory) is started again for the time left,
# so a finding costs no core for the rest of the run. At the end it prints per target the
# executions summed over all workers and restarts, the corpus size, and every artifact
# (crash-, timeout-, oom-, leak-, slow-unit-) with the log lines that explain it; with $OUT
# set, the artifacts, their log excerpts, the summary and the grown corpora go there.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
secs="${1:-540}"
ncpu="$(nproc)"
workers="${2:-$ncpu}"
root="${FZ_ROOT:-/root/fz}"
# $FZ_TARGETS: the targets to run (default all three), e.g. a second run of the two that
# have not reached their count.
read -r -a targets <<<"${FZ_TARGETS:-tokenizer chat_template model_load}"
flags=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1)
# $FZ_EXTRA: more libFuzzer flags, after these (the last of a flag wins), e.g. to test the
# script's handling of findings with -rss_limit_mb=300.
read -r -a extra <<<"${FZ_EXTRA:-}"
export RUST_BACKTRACE=1

start=$(date +%s)
deadline=$((start + secs))
rm -rf "$root"
mkdir -p "$root"
for t in "${targets[@]}"; do
  mkdir -p "$root/$t/corpus" "$root/$t/artifacts" "$root/$t/logs"
  gunzip -c "$here/$t.gz" >"$root/$t/$t" && chmod +x "$root/$t/$t" || { echo "fz: cannot unpack $t" >&2; exit 1; }
  tar -xzf "$here/corpus-$t.tar.gz" -C "$root/$t/corpus" || { echo "fz: cannot unpack the corpus of $t" >&2; exit 1; }
  # A quick check that the binary runs here (its libraries, glibc) before spending the time.
  "$root/$t/$t" -help=1 >"$root/$t/logs/check.log" 2>&1 </dev/null ||
    { echo "fz: $t does not run here:" >&2; tail -5 "$root/$t/logs/check.log" >&2; exit 1; }
done

# Workers per target: an even share, at least one each; the remainder to the last.
nt=${#targets[@]}
per=$((workers / nt))
[ "$per" -lt 1 ] && per=1
declare -A share=()
for t in "${targets[@]}"; do share[$t]=$per; done
last="${targets[nt - 1]}"
share[$last]=$((workers - (nt - 1) * per > 0 ? workers - (nt - 1) * per : 1))
echo "fz: $ncpu cores, $workers workers ($(for t in "${targets[@]}"; do printf '%s %s, ' "$t" "${share[$t]}"; done)$secs s), in $root"
[ -f "$here/BUILD" ] && sed 's/^/fz: /' "$here/BUILD"

# One worker: libFuzzer on the target's shared corpus until the deadline, started again
# (at most 50 times) when it stops early; its logs append to logs/w<N>.log.
worker() {
  local t="$1" w="$2" runs=0 left
  while :; do
    left=$((deadline - $(date +%s)))
    [ "$left" -lt 5 ] && break
    runs=$((runs + 1))
    [ "$runs" -gt 50 ] && break
    echo "== fz run $runs, $left s left" >>"$root/$t/logs/w$w.log"
    # -max_total_time ends it in time; timeout (SIGINT: final stats still printed) in case not.
    (cd "$root/$t" && timeout -s INT -k 10 $((left + 15)) "./$t" -max_total_time="$left" "${flags[@]}" "${extra[@]}" \
      -artifact_prefix="$root/$t/artifacts/" corpus >>"logs/w$w.log" 2>&1 </dev/null)
  done
}

for t in "${targets[@]}"; do
  for ((w = 1; w <= ${share[$t]}; w++)); do
    worker "$t" "$w" &
  done
done
wait

# The report lines (panic, sanitizer error, timeout) that precede artifact $2 in target $1's logs.
explain() {
  cat "$root/$1"/logs/w*.log | awk -v a="Test unit written to $2" '
    /^== fz run|Test unit written to/ { if (index($0, a)) { for (i = 0; i < n; i++) print keep[i]; exit } n = 0; next }
    /panicked at|ERROR: libFuzzer|==ERROR|SUMMARY:|ALARM:|Assertion/ { if (n < 6) keep[n++] = $0 }'
}

echo
echo "fz: finished after $(($(date +%s) - start)) s"
summary="$root/summary.txt"
: >"$summary"
for t in "${targets[@]}"; do
  execs=$(cat "$root/$t"/logs/w*.log 2>/dev/null | awk '/^stat::number_of_executed_units:/ { s += $2 } END { print s + 0 }')
  runs=$(cat "$root/$t"/logs/w*.log 2>/dev/null | grep -c '^== fz run')
  arts=$(ls "$root/$t/artifacts" 2>/dev/null | wc -l)
  {
    echo "$t: $execs executions in ${share[$t]} workers ($((execs / secs)) exec/s together), corpus $(ls "$root/$t/corpus" | wc -l) inputs, $((runs - ${share[$t]})) restarts, $arts artifacts"
    for a in "$root/$t"/artifacts/*; do
      [ -e "$a" ] || continue
      name=$(basename "$a")
      echo "  $name ($(stat -c %s "$a") bytes)"
      # What the log says of the finding: the panic or sanitizer report before "Test unit written".
      explain "$t" "$a" | sed 's/^/    /'
    done
  } | tee -a "$summary"
done

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$summary" "$OUT/"
  for t in "${targets[@]}"; do
    if [ -n "$(ls "$root/$t/artifacts" 2>/dev/null)" ]; then
      mkdir -p "$OUT/$t"
      cp "$root/$t"/artifacts/* "$OUT/$t/"
      for a in "$root/$t"/artifacts/*; do
        grep -h -B80 "Test unit written to $a" "$root/$t"/logs/w*.log | tail -80 >"$OUT/$t/$(basename "$a").log"
      done
    fi
    # The grown corpus (a head start for the next run) unless it is large.
    tar -czf "$root/corpus-$t.tar.gz" -C "$root/$t/corpus" .
    if [ "$(stat -c %s "$root/corpus-$t.tar.gz")" -lt $((8 << 20)) ]; then
      cp "$root/corpus-$t.tar.gz" "$OUT/"
    fi
  done
  echo "fz: summary, artifacts and corpora in $OUT"
fi
