#!/usr/bin/env bash
# Timing-stage calibration on a GPU machine: for the copy kernel at four sizes (about 2 us, 20 us,
# 200 us and 2 ms on an H200) and its launch floor (n = 1024), and for each operator's seed, the
# median from kharness (CUPTI), from ncu --clock-control none (gpu__time_duration), and from CUDA
# events; their ratios; the spread of
# kharness medians over 5 separate processes; the copy's achieved bandwidth.
# Targets: kharness within 2% of ncu for kernels >= 10 us and within 0.5 us below; spread
# <= 1% for kernels >= 20 us; copy bandwidth within 10% of the measured ceiling. Then the same
# comparison net of the launch floor (ncu's fixed cost beyond CUPTI's activity span), and the
# copy's timings against the arbiter: its blocks' own %globaltimer span (scripts/timer-probe.cu).
#
#   scripts/bench-timing.sh [KHARNESS_BINARY]    PROCESSES (default 5), NCU (default ncu),
#                                                ONLY (regex over "operator {axes}": a subset),
#                                                NCU_CACHE_CONTROL (all | none; default all)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KHARNESS="$(realpath "${1:-build/kharness}")"
PROCESSES="${PROCESSES:-5}"
NCU="${NCU:-ncu}"
[[ -x "$KHARNESS" ]] || { echo "bench-timing: no kharness binary at '$KHARNESS'" >&2; exit 2; }
# The arbiter (scripts/timer-probe.cu): the copy kernel's own %globaltimer span per size.
PROBE=""
if command -v nvcc >/dev/null 2>&1; then
  PROBE_DIR="$(mktemp -d)"
  trap 'rm -rf "$PROBE_DIR"' EXIT
  PROBE="$PROBE_DIR/timer-probe"
  nvcc -O3 -arch=sm_90 scripts/timer-probe.cu -o "$PROBE" || PROBE=""
fi
export KHARNESS PROCESSES NCU PROBE
python3 - <<'PY'
import csv, io, json, os, tempfile, statistics, subprocess, sys

import re
K, N, NCU = os.environ["KHARNESS"], int(os.environ["PROCESSES"]), os.environ["NCU"]
# ncu flushes caches itself by default ("all"); "none" leaves it to kharness's own L2 flush, which
# runs before every iteration: comparing the two separates ncu's fixed overhead from cache effects.
NCU_CACHE = os.environ.get("NCU_CACHE_CONTROL", "all")
ONLY = re.compile(os.environ.get("ONLY", ""))  # a regex over "operator {axes}" to run a subset

def run(args, timeout=600):
    # Each call measures afresh: a private archive, so the verdict cache cannot answer it.
    with tempfile.TemporaryDirectory(prefix="kharness-bench-") as archive:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, KHARNESS_ARCHIVE=archive))
    return p.returncode, p.stdout, p.stderr

def bench(solution, op, uuids, timer="cupti", extra=()):
    """Times several workloads of one solution in one process; returns {uuid: candidate timing}."""
    rc, out, err = run([K, "bench", solution, "--operator", op, "--workloads", ",".join(uuids),
                        "--no-baseline", "--timer", timer, "--json", "--seed", "1", *extra])
    if rc != 0:
        raise RuntimeError(f"kharness bench {solution} {uuids} ({timer}) exited {rc}: {err[-400:]} {out[-400:]}")
    return {w["uuid"]: w["timing"]["candidate"] for w in json.loads(out)["workloads"]}

def kernel_name(solution, op):
    rc, out, err = run([K, "compile", solution, "--operator", op, "--json"])
    return json.loads(out[out.index("{"):])["kernels"][0]["name"]

def ncu_median(solution, op, uuid, kernel):
    rc, out, err = run([NCU, "--clock-control", "none", "--cache-control", NCU_CACHE, "--metrics", "gpu__time_duration.sum", "--csv",
                        "--target-processes", "all", "--kernel-name", kernel, "--launch-skip", "4", "--launch-count", "12",
                        K, "bench", solution, "--operator", op, "--workloads", uuid, "--no-baseline",
                        "--timing", "official", "--warmup-runs", "2", "--iterations", "30", "--num-trials", "1",
                        "--timer", "events", "--seed", "1", "--timeout", "600"], timeout=900)
    rows = [r for r in csv.reader(io.StringIO(out[out.find('"ID"'):])) if r] if '"ID"' in out else []
    if not rows:
        return None, (err or out)[-300:]
    head = rows[0]
    unit_i, value_i = head.index("Metric Unit"), head.index("Metric Value")
    scale = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
    vals = [float(r[value_i].replace(",", "")) * scale.get(r[unit_i], 1e-9) for r in rows[1:]]
    return (statistics.median(vals) if vals else None), ""

cases = {}  # operator -> (seed, [(uuid, axes)])
ops = json.loads(run([K, "operators", "list", "--json"])[1])
for entry in ops:
    name = entry["name"]
    show = json.loads(run([K, "operators", "show", name, "--json"])[1])
    seed = show["files"]["seed"]
    if seed == "-":
        continue
    wls = show["workloads"]
    if name != "copy_f32":  # seeds: smallest, middle and largest workload
        wls = [wls[0], wls[len(wls) // 2], wls[-1]]
    for w in wls:
        if ONLY.search(f"{name} {json.dumps(w['axes'])}"):
            cases.setdefault(name, (seed, []))[1].append((w["uuid"], w["axes"]))

if not cases:  # a filter that leaves nothing is not a pass
    print(f"bench-timing: ONLY={ONLY.pattern!r} matches no operator workload")
    sys.exit(2)
rows, failures = [], []
ok = True
print(f"{'operator':14s} {'axes':22s} {'kharness':>10s} {'ncu':>10s} {'events':>10s} {'kh/ncu':>7s} {'ev/kh':>6s} {'spread':>7s} {'samples':>7s} target", flush=True)
for op, (seed, wls) in cases.items():
    # One process per timer for all of the operator's workloads; the spread over PROCESSES
    # separate processes likewise (each gives a median for every workload).
    try:
        uuids = [u for u, _ in wls]
        kh_t = bench(seed, op, uuids)
        ev_t = bench(seed, op, uuids, timer="events")
        spread_uuids = [u for u in uuids if op == "copy_f32" or kh_t[u]["median"] >= 20e-6]
        meds = {u: [] for u in spread_uuids}
        for _ in range(N if spread_uuids else 0):
            for u, t in bench(seed, op, spread_uuids).items():
                meds[u].append(t["median"])
        kernel = kernel_name(seed, op)
    except Exception as ex:  # keep going: one broken operator must not hide the others
        failures.append(f"{op}: {ex}")
        print("ERROR", failures[-1], flush=True)
        continue
    for uuid, axes in wls:
        k = kh_t[uuid]
        n, note = ncu_median(seed, op, uuid, kernel)
        spread = (max(meds[uuid]) / min(meds[uuid]) - 1) if meds.get(uuid) else None
        r = dict(op=op, axes=axes, kh=k["median"], samples=k["count"], noise=k["noise"], ncu=n,
                 ev=ev_t[uuid]["median"], spread=spread, note=note, gpu_time=k["median"] * k["count"])
        rows.append(r)
        kh, ev = r["kh"], r["ev"]
        good = bool(n) and abs(kh - n) <= (0.02 * n if n >= 10e-6 else 0.5e-6)
        if r["spread"] is not None and kh >= 20e-6 and r["spread"] > 0.01:
            good = False
        # The launch floor (copy n = 1024) is a reference point, not a kernel under test.
        if not (op == "copy_f32" and axes.get("n") == 1024):
            ok = ok and good
        print(f"{r['op']:14s} {json.dumps(r['axes']):22s} {kh*1e6:9.2f}u {(n or 0)*1e6:9.2f}u {ev*1e6:9.2f}u "
              f"{(kh/n if n else float('nan')):7.3f} {ev/kh:6.2f} "
              f"{('%.2f%%' % (100*r['spread'])) if r['spread'] is not None else '-':>7s} {r['samples']:7d} {'PASS' if good else 'FAIL'}",
              flush=True)
        if r["note"]:
            print(f"    ncu: {r['note']}", flush=True)
# The launch floor: the copy of n = 1024 (one block, nothing to measure) shows each timer's fixed
# cost. ncu's gpu__time_duration spans more of the launch than CUPTI's activity record, so the
# kernels are compared again net of the two floors' difference.
floor = next((r for r in rows if r["op"] == "copy_f32" and r["axes"].get("n") == 1024 and r["ncu"]), None)
if floor:
    off = floor["ncu"] - floor["kh"]
    print(f"launch floor (copy n=1024): kharness {floor['kh']*1e6:.2f} us, ncu {floor['ncu']*1e6:.2f} us, "
          f"events {floor['ev']*1e6:.2f} us; ncu's fixed cost over kharness: {off*1e6:.2f} us")
    print(f"{'net of the floor':37s} {'kharness':>10s} {'ncu-off':>10s} {'kh/net':>7s} target")
    net_ok = True
    for r in rows:
        if r is floor or not r["ncu"]:
            continue
        net = r["ncu"] - off
        good = abs(r["kh"] - net) <= (0.02 * net if net >= 10e-6 else 0.5e-6)
        net_ok = net_ok and good
        print(f"{r['op'][:14]:14s} {json.dumps(r['axes'])[:22]:22s} {r['kh']*1e6:9.2f}u {net*1e6:9.2f}u "
              f"{r['kh']/net:7.3f} {'PASS' if good else 'FAIL'}")
    print(f"net of the floor: {'PASS' if net_ok else 'FAIL'} (kharness within 2% of ncu minus its fixed cost, 0.5 us below 10 us)")
# The arbiter: how long the copy kernel's blocks ran by their own %globaltimer stamps (first
# block start to last block end). A timer's excess over it is launch and drain work it counts.
probe = {}
if os.environ.get("PROBE"):
    try:
        p = subprocess.run([os.environ["PROBE"], "50"], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, 124, "", "timed out after 300 s")
    for line in p.stdout.splitlines():
        if line.startswith("PROBE_RESOLUTION "):
            print(f"%globaltimer step on this GPU: {line.split('=')[1]} ns")
        if line.startswith("PROBE "):
            f = dict(kv.split("=") for kv in line.split()[1:])
            probe[int(f["n"])] = (float(f["span_us"]) * 1e-6, float(f["events_us"]) * 1e-6)
    if not probe:
        print(f"timer-probe gave nothing: {(p.stderr or p.stdout)[-300:]}")
if probe:
    # probe ev: CUDA events around the probe's own launch (launch overhead included). The probe's
    # kernel is the seed's plus its stamps, so it runs a little longer than the seed: kh-span and
    # ncu-span compare across different kernels. The "via events" columns anchor each timer to the
    # CUDA-event time of its own kernel instead: a timer's excess over the block span is
    # (probe events - span) - (events - timer), the event overhead being the same launch path.
    print(f"{'copy vs block span':22s} {'span':>9s} {'kharness':>9s} {'ncu':>9s} {'probe ev':>9s} {'kh-span':>8s} {'ncu-span':>9s}"
          f" {'kh-span via events':>19s} {'ncu-span via events':>20s}")
    for r in rows:
        if r["op"] != "copy_f32" or r["axes"]["n"] not in probe:
            continue
        sp, pev = probe[r["axes"]["n"]]
        n = r["ncu"]
        kh_excess = (pev - sp) - (r["ev"] - r["kh"])
        ncu_excess = (pev - sp) - (r["ev"] - n) if n else float("nan")
        print(f"copy n={r['axes']['n']:<15d} {sp*1e6:8.2f}u {r['kh']*1e6:8.2f}u "
              f"{(n or 0)*1e6:8.2f}u {pev*1e6:8.2f}u {(r['kh']-sp)*1e6:7.2f}u "
              f"{((n - sp)*1e6 if n else float('nan')):8.2f}u {kh_excess*1e6:18.2f}u {ncu_excess*1e6:19.2f}u")
for r in rows:
    if r["op"] == "copy_f32" and r["axes"]["n"] > 1024:
        bw = 8 * r["axes"]["n"] / r["kh"]
        print(f"copy n={r['axes']['n']}: {bw/1e12:.2f} TB/s achieved; adaptive GPU time {r['gpu_time']:.3f} s over {r['samples']} samples")
print(f"BENCH timing cases={len(rows)} failures={len(failures)} result={'PASS' if ok and not failures else 'FAIL'}")
sys.exit(0 if ok and not failures else 1)
PY
