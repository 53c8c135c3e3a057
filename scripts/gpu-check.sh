#!/usr/bin/env bash
# The GPU check: the CUDA backend's contact with a machine, its calibration, and the simulator
# validated against the executor on it, in one command that fits one 10-minute device call.
#
#   scripts/gpu-check.sh [--bin DIR] [--out DIR] [--budget SECONDS]
#
#   --bin DIR      prebuilt binaries: `kvplan` and, optionally, `exec-tests` (the kvplan-exec
#                  integration tests, run with --include-ignored). A GPU machine may have no Rust:
#                  make them with scripts/gpu-bundle.sh where cargo is. Default: build with cargo.
#   --out DIR      where the results go [default: gpu-check-out]:
#                    report.md       the report: machine, tests, calibration figures (per-op launch
#                                    overhead, pinned and pageable copies at 64 MiB), one row per
#                                    validated case (simulated vs measured), what was skipped
#                    profile.toml    the calibrated hardware profile (`calibrate --backend cuda`),
#                                    valid as --hardware for every command
#                    validate.csv    every validated case's items (end to end, categories, ops,
#                                    decode steps): case,item,simulated_s,measured_s,error
#                    log.txt         every step's full output and exit code
#   --budget S     stop starting steps once S seconds have passed [default: 540]; what was not
#                  run is listed as skipped in the report
#
# Exit status: 0 when every step that ran passed, 1 otherwise, 2 on bad arguments. Without a
# CUDA GPU the first step says so and everything after it is skipped.
set -u
BIN= OUT=gpu-check-out BUDGET=540
while [ $# -gt 0 ]; do
  case $1 in
  --bin) BIN=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  --budget) BUDGET=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $BUDGET in '' | *[!0-9]*) echo "gpu-check: --budget takes whole seconds, not '$BUDGET'" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build --release --locked) || exit 1
  BIN=$ROOT/target/release
fi
KV=$BIN/kvplan
[ -x "$KV" ] || { echo "gpu-check: no kvplan binary at $KV" >&2; exit 2; }
LOG=$OUT/log.txt PROFILE=$OUT/profile.toml CSV=$OUT/validate.csv LAST=$OUT/.last-step
trap 'rm -f "$LAST" "$LOG.step"' EXIT
: >"$LOG"
echo "case,item,simulated_s,measured_s,error" >"$CSV"
START=$(date +%s)
failed=0 gpu=yes
ran=() skipped=() cases=()

# step NAME TIMEOUT CMD...: runs CMD with its output in the log; records pass/fail/skip.
step() {
  local name=$1 limit=$2
  shift 2
  local used=$(($(date +%s) - START))
  if [ "$gpu" != yes ]; then skipped+=("$name (no CUDA GPU)"); return 1; fi
  if [ "$used" -ge "$BUDGET" ]; then skipped+=("$name (budget of $BUDGET s spent)"); return 1; fi
  [ $((BUDGET - used)) -lt "$limit" ] && limit=$((BUDGET - used))
  echo "=== $name: $*" >>"$LOG"
  local t0=$(date +%s%N)
  timeout "$limit" "$@" >>"$LOG.step" 2>&1
  local rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  cat "$LOG.step" >>"$LOG"
  local s=$(printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)))
  echo "=== $name: exit $rc, $s" >>"$LOG"
  echo "gpu-check: $name: exit $rc, $s" >&2
  if [ "$rc" -eq 0 ]; then
    ran+=("| $name | passed | $s |")
  else
    [ "$rc" -eq 124 ] && why="stopped after $limit s" || why="failed (exit $rc)"
    ran+=("| $name | **$why**: \`$(grep -v '^\s*$' "$LOG.step" | tail -n 1 | tr '|`' '/ ' | cut -c1-160)\` | $s |")
    failed=1
  fi
  mv "$LOG.step" "$LAST"
  return "$rc"
}

# validate CASE PROFILE ARGS...: one validated case, its items appended to validate.csv.
validate() {
  local case=$1 prof=$2
  shift 2
  if step "validate $case" 240 "$KV" validate --backend cuda --hardware "$prof" --max-error 1 \
    --format csv "$@"; then
    # The step's output is validate's CSV: items after the header, tagged with the case.
    tail -n +2 "$LAST" | grep -E '^[a-z_]+(:[^,]*)?,[-+0-9.eE]+,' | sed "s|^|$case,|" >>"$CSV"
    cases+=("$case")
  fi
}

# --- the machine --------------------------------------------------------------------------
MACHINE=$(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>/dev/null)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
step "exec opens the GPU" 120 "$KV" exec --backend cuda --hardware h100-sxm --model opt-125m --batch 4 --prompt 64 --gen 4 || gpu=no
if [ "$gpu" = no ] && [ -z "$MACHINE" ]; then MACHINE="no GPU (nvidia-smi found none)"; fi

# --- the ignored GPU tests ------------------------------------------------------------------
if [ -x "$BIN/exec-tests" ]; then
  step "kvplan-exec tests with the GPU ones" 180 "$BIN/exec-tests" --include-ignored --test-threads=1
else
  skipped+=("kvplan-exec GPU tests (no exec-tests binary in $BIN: make one with scripts/gpu-bundle.sh)")
fi

# --- calibration --------------------------------------------------------------------------
step "calibrate --backend cuda" 240 "$KV" calibrate --backend cuda --out "$PROFILE" --format csv
[ -f "$PROFILE" ] && P=$PROFILE || P=

# --- validation on the calibrated profile --------------------------------------------------
if [ -n "$P" ]; then
  for bp in "32 256" "32 1024" "32 2048" "64 256" "64 1024"; do
    set -- $bp
    validate "kvpr opt-6.7b b$1 p$2" "$P" --strategy kvpr --model opt-6.7b --batch "$1" --prompt "$2" --gen 8
  done
  skipped+=("kvpr opt-6.7b b64 p2048 (its KV and kept activations need about 100 GiB of pinned host memory)")
  validate "full-transfer opt-6.7b b32 p1024" "$P" --strategy full-transfer --model opt-6.7b --batch 32 --prompt 1024 --gen 8
  validate "gpu-only opt-6.7b b32 p1024" "$P" --strategy gpu-only --model opt-6.7b --batch 32 --prompt 1024 --gen 8
  validate "headinfer llama-3-8b c8192" "$P" --strategy headinfer --model llama-3-8b --context 8192 --gen 8
  validate "runahead llama-3-8b c8192 x$((NGPU > 0 ? NGPU : 1))" "$P" --strategy runahead --model llama-3-8b --context 8192 --devices $((NGPU > 0 ? NGPU : 1))
  [ "$NGPU" -gt 1 ] || skipped+=("runahead across GPUs (one GPU here: the chain runs as one device's chunked prefill)")
else
  skipped+=("validation on the calibrated profile (no profile)")
fi
# The uncalibrated preset on one case, to show what calibration changes.
validate "kvpr opt-6.7b b32 p1024 (preset h100-sxm)" h100-sxm --strategy kvpr --model opt-6.7b --batch 32 --prompt 1024 --gen 8

# --- the report ---------------------------------------------------------------------------
num() { awk -v x="$1" -v d="${2:-1}" 'BEGIN { printf "%.*f", d, x }'; }
copy_at() { # TABLE -> GB/s at 64 MiB from calibrate's CSV in the log
  awk -F, -v t="$1" '$1 == t && $2 == 67108864 { v = $4 } END { if (v != "") printf "%.1f GB/s", v; else printf "-" }' "$LOG"
}
toml() { [ -n "$P" ] && awk -F' = ' -v k="$1" '$1 == k { print $2; exit }' "$P"; }
{
  echo "# kvplan GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), kvplan $("$KV" --version 2>/dev/null | awk '{print $2}'), $(($(date +%s) - START)) s in all."
  echo
  echo "Machine: ${MACHINE:-unknown} ($NGPU GPU(s); name, memory, driver, PCIe gen, width)."
  echo
  echo "## Steps"
  echo
  echo "| step | result | time |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${ran[@]}"
  echo
  grep -h '^test result:' "$LOG" | sed 's/^/Tests: /'
  echo
  if [ -n "$P" ]; then
    echo "## Calibration (\`profile.toml\`)"
    echo
    echo "| figure | value |"
    echo "| --- | --- |"
    echo "| per-op launch overhead of the executor | $(num "$(toml kernel_overhead_us)" 2) us |"
    echo "| pinned H2D / D2H at 64 MiB | $(copy_at h2d_pinned) / $(copy_at d2h_pinned) |"
    echo "| pageable H2D / D2H at 64 MiB | $(copy_at h2d_pageable) / $(copy_at d2h_pageable) |"
    echo "| pinned H2D / D2H, large copies (profile) | $(num "$(toml h2d_pinned_gbps)") / $(num "$(toml d2h_pinned_gbps)") GB/s |"
    echo "| copy latency H2D / D2H | $(num "$(toml h2d_latency_us)" 2) / $(num "$(toml d2h_latency_us)" 2) us |"
    echo "| link duplex | $(toml duplex | tr -d '"') |"
    echo "| GEMM memory / compute efficiency (fitted) | $(num "$(toml memory_efficiency)" 3) / $(num "$(toml compute_efficiency)" 3) |"
    echo
  fi
  [ ${#cases[@]} -gt 0 ] && {
  echo "## Simulated (profile) vs measured (executor)"
  echo
  echo "Error = simulated / measured - 1. Decode: the sum of the decode steps; step |error|: the"
  echo "median and worst over the steps."
  echo
  echo "| case | simulated | measured | error | decode error | step \\|error\\| median / max |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for c in "${cases[@]}"; do
    row=$(awk -F, -v c="$c" '
      $1 == c && $2 == "end_to_end" { s = $3; m = $4 }
      $1 == c && $2 ~ /^step:/ { ds += $3; dm += $4; n++ }
      END { printf "%.3f s|%.3f s|%+.1f%%|%s", s, m, (s / m - 1) * 100,
              n ? sprintf("%+.1f%%", (ds / dm - 1) * 100) : "-" }' "$CSV")
    steps=$(awk -F, -v c="$c" '$1 == c && $2 ~ /^step:/ { e = $3 / $4 - 1; print (e < 0 ? -e : e) * 100 }' "$CSV" | sort -g |
      awk '{ a[n++] = $1 } END { if (!n) { print "-"; exit }
             med = n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2
             printf "%.1f%% / %.1f%%", med, a[n - 1] }')
    echo "| $c | ${row//|/ | } | $steps |"
  done
  echo
  }
  echo "## Skipped"
  echo
  if [ ${#skipped[@]} -eq 0 ]; then echo "Nothing."; else printf -- '- %s\n' "${skipped[@]}"; fi
} >"$OUT/report.md"
echo "gpu-check: report in $OUT/report.md" >&2
exit $failed
