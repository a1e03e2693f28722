#!/usr/bin/env bash
# Fuzzes the parsers with libFuzzer (tests/fuzz/, docs/testing.md "Fuzzing"): builds the fuzz_<target>
# binaries with clang, ASan and UBSan in build-fuzz/, runs each target for FUZZ_SECONDS and fails when any
# found a crash, a sanitizer report, a leak, a timeout or ran out of memory.
#
#   scripts/fuzz.sh [target...]           fuzz (all targets by default); make fuzz
#   scripts/fuzz.sh --merge [target...]   minimise what fuzzing found into tests/fuzz/corpus/; make fuzz-merge
#   scripts/fuzz.sh --list                the targets
#
# Environment: FUZZ_SECONDS (60) per target, FUZZ_JOBS (1) targets at a time, FUZZ_TIMEOUT (10) seconds
# per input, FUZZ_RSS_MB (2048), BUILD_DIR (build-fuzz), JOBS (nproc) compile jobs.
#
# Corpora: tests/fuzz/corpus/<target>/ (in the repository) is a read-only seed; what a run finds goes to
# BUILD_DIR/corpus/<target>/, crash/leak/timeout reproducers to BUILD_DIR/artifacts/<target>/, the
# fuzzer's output to BUILD_DIR/logs/<target>.log. A reproducer replays with
#   BUILD_DIR/bin/fuzz_<target> BUILD_DIR/artifacts/<target>/crash-...
# and, once fixed, belongs in the repository corpus as tests/fuzz/corpus/<target>/regress-<what> so that
# fuzz_replay_<target> keeps it fixed (merges never drop regress-* files).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
JOBS=${JOBS:-$(nproc)}
REPO_CORPUS=tests/fuzz/corpus
# The per-target cap on repository corpus files found by fuzzing (seeds excluded), in KB.
MAX_CORPUS_KB=${MAX_CORPUS_KB:-300}

ALL_TARGETS=(schedule_json msccl_xml policy_json condition attributes emulate nccl_algo forced_schedule
             bootstrap_wire control_messages doctor_dumps)

# Longest input per target: documents get room for a few ranks' programs, strings stay short.
max_len() {
  case $1 in
    schedule_json | msccl_xml | policy_json) echo 12288 ;;
    attributes | bootstrap_wire | control_messages) echo 8192 ;;
    doctor_dumps) echo 49152 ;;
    *) echo 2048 ;;
  esac
}

mode=fuzz
targets=()
for a in "$@"; do
  case $a in
    --merge) mode=merge ;;
    --list) printf '%s\n' "${ALL_TARGETS[@]}"; exit 0 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $a" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (--list)" >&2; exit 2; }
done

# ---- build -------------------------------------------------------------------------------------------
scripts/setup-deps.sh fuzz
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTHESEUS_FUZZ=ON \
    -DTHESEUS_CUDA=OFF -DTHESEUS_BUILD_TESTS=OFF
else
  cmake -S . -B "$BUILD_DIR" > /dev/null  # picks up targets added since the directory was configured
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD_DIR/corpus" "$BUILD_DIR/artifacts" "$BUILD_DIR/logs"

dict_args() {
  local d=tests/fuzz/$1.dict
  [[ -f $d ]] && echo "-dict=$d"
  return 0
}

# ---- merge: the repository corpus = its seeds and regression inputs + a minimal set of what fuzzing found --
# seed-*: written by tests/fuzz/make_seeds.py; regress-*: reproducers of fixed bugs, kept whatever their
# coverage; every other file is replaced by the merge's output (named by SHA-1).
if [[ $mode == merge ]]; then
  for t in "${targets[@]}"; do
    work=$BUILD_DIR/corpus/$t
    out=$(mktemp -d "$BUILD_DIR/merge-$t.XXXXXX")
    old=$(mktemp -d "$BUILD_DIR/merge-old-$t.XXXXXX")
    mkdir -p "$work"
    find "$REPO_CORPUS/$t" -maxdepth 1 -type f \( -name 'seed-*' -o -name 'regress-*' \) -exec cp {} "$out"/ \;
    find "$REPO_CORPUS/$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regress-*' -exec cp {} "$old"/ \;
    "$BUILD_DIR/bin/fuzz_$t" -merge=1 -max_len="$(max_len "$t")" -timeout="$FUZZ_TIMEOUT" \
      -rss_limit_mb="$FUZZ_RSS_MB" $(dict_args "$t") "$out" "$old" "$work" > "$BUILD_DIR/logs/$t-merge.log" 2>&1 ||
      { echo "$t: merge failed (see $BUILD_DIR/logs/$t-merge.log)" >&2; exit 1; }
    find "$REPO_CORPUS/$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regress-*' -delete
    find "$out" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regress-*' -exec cp {} "$REPO_CORPUS/$t"/ \;
    rm -rf "$out" "$old"
    found=$(find "$REPO_CORPUS/$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regress-*' | wc -l)
    kb=$(find "$REPO_CORPUS/$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regress-*' -printf '%s\n' |
      awk '{s+=$1} END {print int(s/1024)}')
    echo "$t: $found inputs found by fuzzing kept ($kb KB) besides $(ls "$REPO_CORPUS/$t" | grep -c '^seed-') seeds" \
      "and $(ls "$REPO_CORPUS/$t" | grep -c '^regress-') regression inputs"
    if [[ $kb -gt $MAX_CORPUS_KB ]]; then
      echo "$t: more than $MAX_CORPUS_KB KB; merge with a smaller max_len or drop inputs" >&2
    fi
  done
  exit 0
fi

# ---- fuzz ------------------------------------------------------------------------------------------
run_one() {
  local t=$1 log=$BUILD_DIR/logs/$1.log art=$BUILD_DIR/artifacts/$1
  rm -rf "$art"
  mkdir -p "$art" "$BUILD_DIR/corpus/$t"
  local rc=0
  "$BUILD_DIR/bin/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout="$FUZZ_TIMEOUT" \
    -rss_limit_mb="$FUZZ_RSS_MB" -malloc_limit_mb="$FUZZ_RSS_MB" -detect_leaks=1 -max_len="$(max_len "$t")" \
    -artifact_prefix="$art/" $(dict_args "$t") "$BUILD_DIR/corpus/$t" "$REPO_CORPUS/$t" > "$log" 2>&1 || rc=$?
  echo "$rc" > "$log.rc"
}

summary() {
  local t=$1 log=$BUILD_DIR/logs/$1.log art=$BUILD_DIR/artifacts/$1
  local rc execs rate cov ft corp status
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(ls "$BUILD_DIR/corpus/$t" | wc -l)
  status=ok
  if [[ $rc != 0 || -n $(ls -A "$art") ]]; then
    status="FAILED (exit $rc; $(ls "$art" | tr '\n' ' ')see $log)"
  fi
  printf '%-17s %10s execs %7s exec/s  cov %-6s ft %-7s corpus %-5s %s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "$corp" "$status"
  [[ $status == ok ]]
}

echo "fuzzing ${#targets[@]} target(s) for ${FUZZ_SECONDS} s each, $FUZZ_JOBS at a time (logs in $BUILD_DIR/logs)"
running=0
for t in "${targets[@]}"; do
  if [[ $running -ge $FUZZ_JOBS ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait || true

: > "$BUILD_DIR/summary.txt"
failed=0
for t in "${targets[@]}"; do
  summary "$t" | tee -a "$BUILD_DIR/summary.txt" || failed=1
done
if [[ $failed != 0 ]]; then
  echo "fuzz: a target found a crash, leak, timeout or out-of-memory input (artifacts in $BUILD_DIR/artifacts/)" >&2
  exit 1
fi
echo "fuzz: no crashes, leaks or timeouts"
