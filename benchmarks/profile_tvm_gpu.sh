#!/usr/bin/env bash
# Issue 16's GPU must-show, on the device machine (H100), in stages that resume:
#   setup  join the carried halves of tvm-wheels.tar, check them, install TVM in /tmp/site-tvm
#   bert   python -m kb_eval.profile --bert at B16xS512 and B1xS128, fp32 and bf16
#   base   python -m kb_eval.baseline on the ops suite and KernelBench level 1 problems 1-20:
#          eager, TVM with the GPU's arch (sm_90), TVM with the generic sm_50
#          (--compile tvm-noarch), torch.compile (default mode); one problem at a time, each file written as it goes
#   summary  $OUT/summary.md: BERT category shares and launches, the baselines side by side
#          (python -m kb_eval.report.baselines) and each TVM file's target
# `all` (the default) runs them in that order; done work is skipped (baseline --resume,
# a profile.json already there), so a call cut by its 10 minutes is continued by the same
# command in the next call while the machine is warm.
#
# Before (here): bash benchmarks/prepare_tvm_carry.sh. Then two consecutive device calls:
#   1. carry [".device-wheels", ".cache/tvm-carry/a"]:
#        ls -la .cache/tvm-carry/a
#   2. carry [".device-wheels", ".cache/tvm-carry/b"]:
#        bash benchmarks/profile_tvm_gpu.sh all
#      (setup checks that a/ from call 1 is still there, and says so if not)
#   3. if call 2 ran out of time, no carry: bash benchmarks/profile_tvm_gpu.sh all
set -uo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_DEVICE_ENV:-}" ] || source .device-wheels/device-env  # skipped: a try here
export PYTHONPATH=/tmp/site-tvm${PYTHONPATH:+:$PYTHONPATH}
ROOT=$PWD
OUT=${OUT:-results/gpu-must-show}
CARRY=.cache/tvm-carry
RES=${RES:-results}  # ignored: kept on the warm machine between calls
PROF=$RES/profile-gpu
KB=${KB:-$CARRY/a/kernelbench}
DEVICE=${DEVICE:-cuda}  # cpu only to try the script where there is no GPU
CALL_S=${CALL_S:-570}  # the device call's limit (600 s) less the summary's time
START=$(date +%s)
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }

setup() {
  if python -c "import tvm" 2>/dev/null; then log "setup: tvm already installed"; return 0; fi
  for half in "$CARRY/a/tvm-wheels.tar.part-00" "$CARRY/b/tvm-wheels.tar.part-01"; do
    [ -f "$half" ] || { log "setup: $half is missing (carry it: see the header)"; return 1; }
  done
  cat "$CARRY"/a/tvm-wheels.tar.part-00 "$CARRY"/b/tvm-wheels.tar.part-01 > /tmp/tvm-wheels.tar
  (cd /tmp && sha256sum -c "$ROOT/$CARRY/a/SHA256SUMS") || { log "setup: checksum differs"; return 1; }
  mkdir -p /tmp/tvm-wheels && tar -xf /tmp/tvm-wheels.tar -C /tmp/tvm-wheels
  python -c "import numpy" || { log "setup: TVM needs numpy, which this Python lacks"; return 1; }
  python -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-tvm \
      /tmp/tvm-wheels/*.whl || return 1
  python -c "import tvm; print('tvm', tvm.__version__, 'cuda', tvm.cuda(0).exist)" \
      | tee -a "$OUT/steps.log"
}

bert() {
  for prec in fp32 bf16; do
    for bs in "16 512" "1 128"; do
      set -- $bs
      if ls "$PROF"/bert-*_b$1_s$2_${prec}/profile.json >/dev/null 2>&1; then continue; fi
      log "bert: B$1 S$2 $prec"
      python -m kb_eval.profile --quiet --bert --batch-sizes "$1" --seq-lens "$2" \
          --precision "$prec" --device "$DEVICE" --out "$PROF" 2>&1 | grep -v USDT | tee -a "$OUT/steps.log"
    done
  done
}

baseline() {  # source, extra selection flags..., then the mode's flags after --
  local src=$1; shift
  local sel=() ; while [ "$1" != "--" ]; do sel+=("$1"); shift; done; shift
  log "baseline: $src ${sel[*]} $*"
  python -m kb_eval.baseline --quiet --source "$src" "${sel[@]}" --precision fp32 \
      --device "$DEVICE" --results-dir "$RES" --resume --timeout 240 "$@" \
      2>&1 | tail -3 | tee -a "$OUT/steps.log"
}

base() {
  for mode in "" "--compile tvm" "--compile tvm-noarch" "--compile default"; do
    baseline ops -- $mode
    baseline "$KB" --level 1 --problems 1-20 -- $mode
  done
}

summary() {
  {
    echo "# Issue 16 GPU must-show ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$DEVICE"))"
    echo; echo "## BERT profiles (category shares of device time, launches per forward)"; echo
    python benchmarks/profile_summary.py "$PROF"
    echo; echo "## Baselines (median ms; speedup x = eager / mode)"; echo
    python -m kb_eval.report.baselines --results-dir "$RES"
    echo; echo "## TVM targets"; echo
    python - "$RES" <<'EOF'
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("baseline/*/*/*tvm*.json")):
    recs = json.loads(path.read_text())["records"].values()
    ok = [r for r in recs if r["status"] == "ok"]
    facts = {(r["compiler"] or {}).get("arch_source", "?") + " " + str((r["compiler"] or {}).get("arch")) for r in ok}
    failed = [f"{r['key']}: {(r.get('error') or '')[:120]}" for r in recs if r["status"] != "ok"]
    print(f"- {path}: {len(ok)} ok, {len(failed)} failed; target: {', '.join(sorted(facts)) or '-'}")
    for line in failed:
        print(f"  - {line}")
EOF
  } > "$OUT/summary.md" 2>&1
  mkdir -p "$OUT/baseline" "$OUT/profile"
  cp -r "$RES"/baseline/. "$OUT/baseline/" 2>/dev/null
  for d in "$PROF"/*/; do  # traces stay here except the smallest configuration's
    mkdir -p "$OUT/profile/$(basename "$d")"
    cp "$d"/profile.json "$d"/report.md "$OUT/profile/$(basename "$d")/" 2>/dev/null
    case "$d" in *_b1_s128_fp32/) cp "$d"/trace.json "$OUT/profile/$(basename "$d")/" ;; esac
  done
  log "summary: $OUT/summary.md"
}

stage=${1:-all}
case "$stage" in
  setup|bert|base|summary) "$stage" ;;
  all) setup && {
         bert
         # what is left of the call for the baselines; the summary is written either way
         left=$((CALL_S - ($(date +%s) - START))); [ "$left" -gt 30 ] || left=30
         timeout "$left" bash "$0" base
         summary; } ;;
  *) echo "usage: bash benchmarks/profile_tvm_gpu.sh [all|setup|bert|base|summary]" >&2; exit 2 ;;
esac
