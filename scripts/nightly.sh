#!/usr/bin/env bash
# The nightly: refresh the stack images (pull each tag, record the digests), run the matrix, write its report,
# diff it against the previous night with the gate `orchestrate diff --fail-on-regression --require-power`, keep
# everything under the run's nightly/ folder, append one summary line to RESULTS/summary.log and point
# RESULTS/latest at tonight's run (the next night's "previous"). README "Nightly runs" documents it.
#
# Exit status: 0 no regression; 1 a cell regressed (corrected test and interval), became undefined, lost seeds
# or vanished; 3 no cell could have shown a change (too few seeds for the cells compared); 2 the nightly itself
# failed (any step: image refresh, matrix, report, diff, summary; a failure line goes to the summary log) or
# was misused. 1 and 3 are taken from `orchestrate diff` only when its --json record of the gate owes them and
# it printed the gate's reason: a crashing diff (a traceback exits 1 too) is a failure, not a regression.
# Only one nightly runs at a time per results folder.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/nightly.sh [--matrix FILE] [--results DIR] [--previous RUN_DIR] [--run RUN_DIR] [--no-refresh]
  --matrix FILE      matrix to run (default: $NIGHTLY_MATRIX or matrices/full.yaml, in this checkout)
  --results DIR      where nightly runs live, with latest -> the last one (default: results/nightly, in this checkout)
  --previous RUN     compare against this run instead of DIR/latest
  --run RUN          reuse this finished run instead of running the matrix (no image refresh; not the previous run)
  --no-refresh       resolve the images without pulling (stacks with a pinned digest always run the pin)
`orchestrate diff` options: --resamples 10000, then $NIGHTLY_DIFF_ARGS (extra options; a repeated one overrides)
EOF
}

abspath() { realpath -m -- "$1"; }
repo="$(cd "$(dirname "$0")/.." && pwd)"
# Options are paths as the caller gives them (against the caller's directory); the defaults, $NIGHTLY_MATRIX
# included, are paths in this checkout (systemd and cron start here, an interactive caller anywhere).
matrix="$(cd "$repo" && abspath "${NIGHTLY_MATRIX:-matrices/full.yaml}")"
results="$repo/results/nightly"
previous=""
run=""
refresh="--refresh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --matrix) matrix="$(abspath "$2")"; shift 2 ;;
    --results) results="$(abspath "$2")"; shift 2 ;;
    --previous) previous="$(abspath "$2")"; shift 2 ;;
    --run) run="$(abspath "$2")"; shift 2 ;;
    --no-refresh) refresh=""; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "nightly: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
cd "$repo"
give_up() {  # the nightly itself failed: say so in the log too, leave latest where it was
  trap - ERR
  set +e
  if [[ $BASHPID != "$$" ]]; then  # in a subshell ($(...)): its parent's failing command says it, once
    echo "nightly: $1" >&2
    exit 2
  fi
  local line
  line="$(date -u +%FT%TZ) nightly FAILED (exit 2): $1"
  echo "$line" >&2
  echo "$line" >>"$results/summary.log" || echo "nightly: cannot write $results/summary.log" >&2
  exit 2
}
# Any failing command is the nightly's failure (exit 2 and a summary line), never a `set -e` exit with the
# command's own status (1 would read as a regression); -E: in functions and subshells as well.
set -E
trap 'give_up "line $LINENO: $BASH_COMMAND (exit $?)"' ERR

orchestrate="${ORCHESTRATE:-$PWD/.venv/bin/orchestrate}"
python="${NIGHTLY_PYTHON:-$PWD/.venv/bin/python}"
# The defaults, then the caller's extra options (a repeated option's last value wins: they can override).
read -r -a extra_diff_args <<<"${NIGHTLY_DIFF_ARGS:-}"
diff_args=(--resamples 10000 "${extra_diff_args[@]}")
export COLUMNS="${COLUMNS:-200}"  # the diff table names each cell in its row (CI logs are 80 columns otherwise)

mkdir -p "$results"
exec 9>"$results/.lock"
if ! flock -n 9; then
  echo "nightly: another nightly holds $results/.lock" >&2
  exit 2
fi
# The previous night: given, else the one `latest` points at; none on the first night.
if [[ -z "$previous" && -e "$results/latest" ]]; then
  previous="$(readlink -f "$results/latest")"
fi
if [[ -n "$previous" && ! -f "$previous/manifest.json" ]]; then
  echo "nightly: previous run $previous has no manifest.json" >&2
  exit 2
fi
if [[ -n "$previous" && -n "$run" && "$(readlink -f "$previous")" == "$(readlink -f "$run")" ]]; then
  echo "nightly: --run $run is the previous night itself (${results}/latest or --previous): nothing to compare" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

manifest_field() {  # RUN FIELD: the manifest's field (JSON, a string as is); empty when absent or null
  "$python" - "$1/manifest.json" "$2" <<'PY'
import json, sys
value = json.load(open(sys.argv[1])).get(sys.argv[2])
print("" if value is None else value if isinstance(value, str) else json.dumps(value, indent=2))
PY
}

if [[ -z "$run" ]]; then
  # Resolve (and pull) before the run, so the run uses tonight's images; record after it, into its manifest.
  "$orchestrate" images --matrix "$matrix" $refresh ${previous:+--previous "$previous"} --out "$work/images.json" \
    || give_up "image refresh failed"
  LC_ALL=C ls -1 "$results" >"$work/before"
  "$orchestrate" matrix "$matrix" --results "$results" || give_up "orchestrate matrix $matrix exited $?"
  LC_ALL=C ls -1 "$results" >"$work/after"
  made="$(LC_ALL=C comm -13 "$work/before" "$work/after" | grep -v '^latest$' || true)"
  [[ $(wc -w <<<"$made") == 1 ]] || give_up "cannot tell which run the matrix made in $results: '$made'"
  run="$results/$made"
  "$orchestrate" images --record "$work/images.json" --into "$run" >/dev/null || give_up "cannot record images"
else
  recorded_images="$(manifest_field "$run" images)"
  if [[ -z "$recorded_images" ]]; then
    # A reused run without an image record: what the engine holds now (no pull), said as such.
    run_matrix="$(manifest_field "$run" matrix_file)"
    "$orchestrate" images --matrix "$run_matrix" ${previous:+--previous "$previous"} --into "$run" >/dev/null \
      || give_up "cannot record images into $run"
  fi
fi
out="$run/nightly"
mkdir -p "$out"
"$orchestrate" report "$run" >"$out/report.log" 2>&1 || give_up "orchestrate report $run failed (see $out/report.log)"
# Cells a lost Ray node or worker left unfinished are the night's infrastructure, not a regression: exit 2.
lost="$("$python" -c 'import json, pathlib, sys
print(" ".join(sorted(p.stem for p in pathlib.Path(sys.argv[1], "cells").glob("*.json")
                      if json.loads(p.read_text()).get("status") == "worker_lost")))' "$run")"
[[ -z "$lost" ]] || give_up "cells worker_lost (a Ray node or worker lost; resume the run, then --run it): $lost"
manifest_field "$run" images >"$out/images.json"
"$orchestrate" images --record "$out/images.json" | tee "$out/images.txt" || give_up "cannot read back the image record"

status=0
if [[ -n "$previous" ]]; then
  "$orchestrate" diff "$previous" "$run" --fail-on-regression --require-power "${diff_args[@]}" \
    >"$out/diff.txt" 2>"$out/diff.err" || status=$?
  cat "$out/diff.txt" "$out/diff.err"
  case $status in
    0|1|3) ;;
    *) give_up "orchestrate diff exited $status: $(tail -1 "$out/diff.err")" ;;
  esac
  "$orchestrate" diff "$previous" "$run" --json "${diff_args[@]}" >"$out/diff.json"
  # 1 and 3 are the gate's only when the diff printed the gate's reason and its own record owes that status:
  # a crash (a traceback exits 1 as well) is the nightly's failure, not a regression.
  owed="$("$python" scripts/nightly_summary.py --gate-status "$out/diff.json")"
  said=""
  case $status in
    1) said="--fail-on-regression: failed:" ;;
    3) said="--require-power: failed:" ;;
  esac
  if [[ "$owed" != "$status" ]] || { [[ -n "$said" ]] && ! grep -qF -- "$said" "$out/diff.err"; }; then
    give_up "orchestrate diff exited $status, but its gate owes $owed: $(tail -1 "$out/diff.err")"
  fi
fi
"$python" scripts/nightly_summary.py "$run" --status "$status" ${previous:+--diff "$out/diff.json" --previous "$previous"} \
  >"$out/summary.txt"
tee -a "$results/summary.log" <"$out/summary.txt"
# Tonight is the next night's previous, regression or not: a regression is reported the morning it appears.
ln -sfn "$run" "$results/latest"
echo "report: $run/report/index.html"
exit "$status"
