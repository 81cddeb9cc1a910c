#!/usr/bin/env bash
# The Slurm launcher for real (docs/archive.md#merge), CTest's SlurmScoreArray (label slurm):
#
#   tests/slurm/run-slurm-test.sh KHARNESS_BINARY
#
# As root, starts a one-node cluster on localhost in a temporary folder (a munge key, munged on a
# private socket, a minimal slurm.conf with free ports, slurmctld and slurmd, found by SLURM_CONF),
# submits scripts/slurm/score-array.sh over a folder of fixtures with --compile-only (no GPU),
# waits (at most SLURM_TEST_TIMEOUT seconds, 300), and checks that the merged statuses and the
# JUnit and JSON reports equal one `kharness score --compile-only` of the same folder (timings,
# timestamps and host names aside). Every exit path stops the jobs and daemons it started and
# removes the folder. Without Slurm and munge (Debian: slurm-wlm munge; SETUP_SLURM=1
# scripts/setup.sh installs them), or not as root, it says so and exits 77 (CTest: skipped).
set -euo pipefail

BIN="$(realpath "${1:?usage: $0 KHARNESS_BINARY}")"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SKIP=77
for tool in munged slurmctld slurmd sbatch sinfo scancel python3; do
  if ! command -v "$tool" >/dev/null 2>&1 && [[ ! -x "/usr/sbin/$tool" ]]; then
    echo "SKIP: $tool not found (install slurm-wlm and munge: SETUP_SLURM=1 scripts/setup.sh)"
    exit "$SKIP"
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: the one-node Slurm cluster needs root (munged, slurmd)"
  exit "$SKIP"
fi
export PATH="$PATH:/usr/sbin"

TMP="$(mktemp -d /tmp/kharness-slurm-test.XXXXXX)"
chmod 700 "$TMP"
PIDS=()
cleanup() {
  local rc=$?
  set +e
  if [[ -f "$TMP/slurm.conf" ]]; then
    SLURM_CONF="$TMP/slurm.conf" scancel --quiet --user=root >/dev/null 2>&1
  fi
  # The daemons this script started, newest first, by pid.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  if ((rc != 0 && rc != SKIP)); then
    echo "--- logs (the test failed) ---"
    for f in "$TMP"/*.log "$TMP"/out/logs/*; do [[ -f "$f" ]] && { echo "== $f"; tail -n 30 "$f"; }; done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "slurm-test: $*"; }
die() { echo "slurm-test: FAIL: $*" >&2; exit 1; }

# A free TCP port (bound and released; the daemons take it a moment later).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# 1. munge: a fresh key and a daemon on a private socket.
dd if=/dev/urandom of="$TMP/munge.key" bs=1024 count=1 status=none
chmod 400 "$TMP/munge.key"
munged --foreground --force --key-file="$TMP/munge.key" --socket="$TMP/munge.sock" \
  --pid-file="$TMP/munged.pid" --log-file="$TMP/munged.log" --seed-file="$TMP/munge.seed" \
  > "$TMP/munged.out.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S "$TMP/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$TMP/munge.sock" ]] || die "munged did not start"

# 2. slurm.conf: this machine as its one node, as slurmd sees it.
NODE="$(hostname -s)"
HW="$(slurmd -C 2>/dev/null | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/RealMemory=[0-9]*//')"
mkdir -p "$TMP/state" "$TMP/spool"
cat > "$TMP/slurm.conf" <<CONF
ClusterName=kharness-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$TMP/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 $HW RealMemory=1 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$TMP/slurm.conf"

# 3. The daemons.
slurmctld -D -i > "$TMP/slurmctld.out.log" 2>&1 &
PIDS+=($!)
slurmd -D -N "$NODE" > "$TMP/slurmd.out.log" 2>&1 &
PIDS+=($!)
state=""
for _ in $(seq 120); do
  state="$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1 || true)"
  [[ "$state" == idle* || "$state" == mixed* ]] && break
  sleep 0.5
done
[[ "$state" == idle* || "$state" == mixed* ]] || die "the node did not come up (state '$state')"
say "one-node cluster up ($NODE, $state)"

# 4. The submissions: the shipped fixtures, good and bad.
SUBS="$TMP/submissions"
mkdir -p "$SUBS/bad"
cp -r "$ROOT/tests/fixtures/good/." "$SUBS/"
cp "$ROOT"/tests/fixtures/bad/*.cu "$SUBS/bad/"
FLAGS=(--compile-only --seed 7)
# Private caches and archives: nothing of an earlier run stands in for this one.
export KHARNESS_CACHE="$TMP/cache" KHARNESS_ARCHIVE="$TMP/unused-archive"

# 5. The job array and its merge, waited for.
start=$SECONDS
rc=0
KHARNESS="$BIN" KHARNESS_SHARDS=3 OUT_DIR="$TMP/out" KHARNESS_SLURM_PARTITION=test \
  KHARNESS_SLURM_GRES="" KHARNESS_SLURM_CPUS=1 KHARNESS_SLURM_TIME=00:10:00 \
  KHARNESS_SLURM_WAIT=1 timeout "${SLURM_TEST_TIMEOUT:-300}" \
  "$ROOT/scripts/slurm/score-array.sh" "$SUBS" rmsnorm_h4096 "${FLAGS[@]}" || rc=$?
((rc == 124)) && die "the jobs did not finish within ${SLURM_TEST_TIMEOUT:-300} s"
((rc <= 1)) || die "score-array.sh exited $rc"
say "array and merge done in $((SECONDS - start)) s (score exit $rc)"
for i in 0 1 2; do [[ -f "$TMP/out/shards/$i/index.sqlite" ]] || die "shard $i left no archive"; done

# 6. One process over the same folder.
one_rc=0
"$BIN" --archive "$TMP/single" score "$SUBS" --operator rmsnorm_h4096 "${FLAGS[@]}" \
  --json "$TMP/one.json" --junit "$TMP/one.xml" > /dev/null 2>&1 || one_rc=$?
((one_rc == rc)) || die "exit codes differ: one process $one_rc, Slurm $rc"

# 7. Equal, after what differs between runs of the same verdicts.
python3 - "$TMP/one.json" "$TMP/out/report.json" "$TMP/one.xml" "$TMP/out/report.xml" <<'PY'
import json, re, sys
def clean(j):
    j.pop("generated_at", None)
    for v in j["solutions"]:
        for k in ("seconds", "phases", "candidate", "cached_from"):
            v.pop(k, None)
        for k in ("seconds", "cache_hit"):
            v.get("compile", {}).pop(k, None)
    return j
def xml(text):
    return re.sub(r' (time|timestamp|hostname)="[^"]*"', "", text)
one, merged = (clean(json.load(open(p))) for p in sys.argv[1:3])
statuses = lambda j: [(v["source"], v["status"]) for v in j["solutions"]]
if statuses(one) != statuses(merged):
    sys.exit(f"statuses differ:\n{statuses(one)}\n{statuses(merged)}")
if one != merged:
    sys.exit("the JSON reports differ")
if xml(open(sys.argv[3]).read()) != xml(open(sys.argv[4]).read()):
    sys.exit("the JUnit reports differ")
print(f"slurm-test: {len(statuses(one))} submissions, statuses and reports equal "
      f"({sum(1 for _, s in statuses(one) if s == 'PASSED')} passed)")
PY
[[ -s "$TMP/out/report.md" ]] || die "no Markdown report"
say "PASS"
