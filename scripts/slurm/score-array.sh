#!/usr/bin/env bash
# Scores a folder of submissions on a Slurm cluster (docs/archive.md#merge): a job array of KHARNESS_SHARDS
# tasks, each `kharness score --shard I/N` on one GPU into an archive of its own, then a merge job
# (after every task, whatever their fate) that joins the archives and writes the reports.
#
#   scripts/slurm/score-array.sh SUBMISSIONS OPERATOR [extra score flags...]
#
# SUBMISSIONS (a folder or a file) and the output folder must be on a file system every node
# sees; the archives are not: each task writes its archive in node-local scratch
# ($SLURM_TMPDIR, else $TMPDIR, else /tmp) and copies it to OUT/shards/I/ once kharness has
# closed it (SQLite must never be shared over a network file system). The merge job writes
#   OUT/merged/        the merged archive (`kharness --archive OUT/merged report --all`)
#   OUT/report.json    kharness.score/1, OUT/report.xml JUnit, OUT/report.md Markdown,
#   OUT/traces.jsonl   FlashInfer-Bench traces, OUT/exit_code (0 all passed, 1 some failed)
# A shard whose task died leaves its submissions as `not_scored` failures in the reports.
#
# One GPU per task (--gres=gpu:1): the scheduler packs tasks onto whatever GPUs are free, on
# any node, and a failed task costs one shard; kharness's pool (--gpus) is for a whole node.
#
# Environment (all optional):
#   KHARNESS                the kharness binary (default: build/kharness of this checkout, else PATH)
#   KHARNESS_SHARDS         array tasks, N of --shard I/N (default 8)
#   OUT_DIR                 output folder (default ./kharness-score-YYYYmmdd-HHMMSS)
#   KHARNESS_SLURM_PARTITION  --partition (default: the cluster's default)
#   KHARNESS_SLURM_GRES     --gres per task (default gpu:1; empty: none, e.g. with --compile-only)
#   KHARNESS_SLURM_TIME     --time per task (default 01:00:00)
#   KHARNESS_SLURM_CPUS     --cpus-per-task (default 4: NVRTC compiles in parallel)
#   KHARNESS_SLURM_MERGE_TIME  --time of the merge job (default 00:20:00)
#   KHARNESS_SLURM_ARGS     more sbatch arguments for both jobs, split at spaces (--account=X ...)
#   KHARNESS_SLURM_WAIT=1   wait for the merge job and exit with the score's exit code
#   SBATCH                  the sbatch command (default sbatch)
set -euo pipefail

usage() {
  echo "usage: $0 SUBMISSIONS OPERATOR [extra kharness score flags...]" >&2
  exit 2
}
(($# >= 2)) || usage
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SUBMISSIONS="$(realpath -e "$1")" || { echo "score-array: no such file or folder: $1" >&2; exit 2; }
OPERATOR="$2"
shift 2
EXTRA=("$@")

KHARNESS="${KHARNESS:-}"
if [[ -z "$KHARNESS" ]]; then
  if [[ -x "$ROOT/build/kharness" ]]; then KHARNESS="$ROOT/build/kharness"; else KHARNESS="$(command -v kharness || true)"; fi
fi
[[ -n "$KHARNESS" && -x "$KHARNESS" ]] || { echo "score-array: no kharness binary (set KHARNESS)" >&2; exit 2; }
KHARNESS="$(realpath "$KHARNESS")"
SHARDS="${KHARNESS_SHARDS:-8}"
[[ "$SHARDS" =~ ^[1-9][0-9]*$ ]] || { echo "score-array: KHARNESS_SHARDS must be a positive integer, got '$SHARDS'" >&2; exit 2; }
OUT="${OUT_DIR:-$PWD/kharness-score-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/shards" "$OUT/logs"
OUT="$(realpath "$OUT")"
SBATCH="${SBATCH:-sbatch}"

common=()
[[ -n "${KHARNESS_SLURM_PARTITION:-}" ]] && common+=(--partition="$KHARNESS_SLURM_PARTITION")
# shellcheck disable=SC2206  # split at spaces on purpose
[[ -n "${KHARNESS_SLURM_ARGS:-}" ]] && common+=($KHARNESS_SLURM_ARGS)
task=(--time="${KHARNESS_SLURM_TIME:-01:00:00}" --cpus-per-task="${KHARNESS_SLURM_CPUS:-4}")
GRES="${KHARNESS_SLURM_GRES-gpu:1}"
[[ -n "$GRES" ]] && task+=(--gres="$GRES")

# What the jobs need, written once (values quoted for bash).
{
  declare -p KHARNESS SUBMISSIONS OPERATOR SHARDS OUT EXTRA
} > "$OUT/job.env"

# Slurm runs a copy of each batch script from its spool: the scripts name job.env by its path.
header() { printf '#!/usr/bin/env bash\n# %s\nset -uo pipefail\nsource %q\n' "$1" "$OUT/job.env"; }

header "One shard: kharness score --shard I/N into a node-local archive, copied to OUT/shards/I." \
  > "$OUT/shard.sh"
cat >> "$OUT/shard.sh" <<'TASK'
I="${SLURM_ARRAY_TASK_ID:?not in a Slurm job array}"
SCRATCH="$(mktemp -d "${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/kharness-shard-$I.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
# The per-GPU timing lock on the node's own disk (flock over NFS is not reliable).
export KHARNESS_LOCK_DIR="${KHARNESS_LOCK_DIR:-/tmp/kharness-gpu-locks-$(id -u)}"
"$KHARNESS" --archive "$SCRATCH/archive" score "$SUBMISSIONS" --operator "$OPERATOR" \
  --shard "$I/$SHARDS" --json "$OUT/shards/$I.json" "${EXTRA[@]}"
rc=$?
# 0 and 1 (some submission failed) are a shard that did its work: keep its archive.
if ((rc <= 1)); then
  rm -rf "$OUT/shards/.$I.tmp" "$OUT/shards/$I"
  cp -r "$SCRATCH/archive" "$OUT/shards/.$I.tmp" && mv "$OUT/shards/.$I.tmp" "$OUT/shards/$I" || exit 4
  exit 0
fi
exit "$rc"
TASK

header "After every shard: merge their archives, write the reports from the merged one." \
  > "$OUT/merge.sh"
cat >> "$OUT/merge.sh" <<'MERGE'
shopt -s nullglob
archives=("$OUT"/shards/*/)
if ((${#archives[@]})); then
  "$KHARNESS" archive merge "$OUT/merged" "${archives[@]}" || exit $?
else
  echo "merge: no shard finished" >&2
  mkdir -p "$OUT/merged"
fi
"$KHARNESS" score --from-archive "$OUT/merged" "$SUBMISSIONS" --operator "$OPERATOR" \
  --json "$OUT/report.json" --junit "$OUT/report.xml" --markdown "$OUT/report.md" \
  --traces "$OUT/traces.jsonl" > "$OUT/leaderboard.md"
rc=$?
echo "$rc" > "$OUT/exit_code"
# A submission that failed is the report's news, not the merge job's failure.
((rc <= 1)) && exit 0
exit "$rc"
MERGE
chmod +x "$OUT/shard.sh" "$OUT/merge.sh"

array_id="$("$SBATCH" --parsable "${common[@]}" "${task[@]}" --job-name=kharness-score \
  --array="0-$((SHARDS - 1))" --output="$OUT/logs/shard-%a.out" "$OUT/shard.sh")"
array_id="${array_id%%;*}"
echo "score-array: job array $array_id ($SHARDS shards of $SUBMISSIONS, $OPERATOR)"
wait_flag=()
[[ "${KHARNESS_SLURM_WAIT:-0}" == 1 ]] && wait_flag=(--wait)
set +e
merge_id="$("$SBATCH" --parsable "${common[@]}" "${wait_flag[@]}" --job-name=kharness-merge \
  --time="${KHARNESS_SLURM_MERGE_TIME:-00:20:00}" --cpus-per-task=1 \
  --dependency="afterany:$array_id" --output="$OUT/logs/merge.out" "$OUT/merge.sh")"
merge_rc=$?
set -e
merge_id="${merge_id%%;*}"
echo "score-array: merge job $merge_id (after $array_id) writes $OUT/report.{json,xml,md}"
if [[ "${KHARNESS_SLURM_WAIT:-0}" == 1 ]]; then
  ((merge_rc == 0)) || { echo "score-array: the merge job failed (exit $merge_rc); see $OUT/logs/merge.out" >&2; exit 4; }
  exit "$(cat "$OUT/exit_code")"
fi
