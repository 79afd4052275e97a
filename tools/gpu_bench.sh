#!/usr/bin/env bash
# Decode-attention comparison on the GPU machine, in one command:
#   tools/gpu_bench.sh path/to/clkv [extra options for clkv bench attention-decode]
# Runs `clkv bench attention-decode` on the NVIDIA OpenCL device for B in {1,8} x
# L in {4096, 32768, 131072} (bf16, Hq 32 / Hkv 8, D 128), then the PyTorch SDPA peer
# (tools/bench_torch_decode.py) on the same shapes, and prints a combined table.
# Environment: BATCH (default 1,8), LENS (default 4096,32768,131072), DEVICE (default
# nvidia), ITERS (default 100), REPEATS (default 15), PYTHON (default python3).
# Exit status: that of the clkv benchmark (non-zero if a shape failed or its check
# failed); a missing/failed PyTorch run is reported in the table but not fatal.
set -uo pipefail

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [[ $# -lt 1 ]] && exit 2 || exit 0
fi
CLKV=$1
shift
if [[ ! -x "$CLKV" ]]; then
    echo "gpu_bench.sh: '$CLKV' is not an executable clkv binary" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BATCH=${BATCH:-1,8}
LENS=${LENS:-4096,32768,131072}
DEVICE=${DEVICE:-nvidia}
ITERS=${ITERS:-100}
REPEATS=${REPEATS:-15}
PYTHON=${PYTHON:-python3}
SHAPE=(--q-heads 32 --kv-heads 8 --dim 128 --dtype bf16)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== clkv bench attention-decode (device: $DEVICE) =="
"$CLKV" bench attention-decode --device "$DEVICE" --batch "$BATCH" --len "$LENS" "${SHAPE[@]}" \
    --iters "$ITERS" --repeats "$REPEATS" --format csv "$@" >"$tmp/clkv.csv"
clkv_rc=$?
if [[ $clkv_rc -ne 0 ]]; then
    echo "gpu_bench.sh: clkv bench exited with $clkv_rc" >&2
fi

echo "== PyTorch scaled_dot_product_attention =="
"$PYTHON" "$HERE/bench_torch_decode.py" --batch "$BATCH" --len "$LENS" "${SHAPE[@]}" \
    --iters "$ITERS" --repeats "$REPEATS" --format csv >"$tmp/torch.csv"
torch_rc=$?
if [[ $torch_rc -ne 0 ]]; then
    echo "gpu_bench.sh: the PyTorch peer exited with $torch_rc (its columns may be empty)" >&2
fi

"$PYTHON" - "$tmp/clkv.csv" "$tmp/torch.csv" <<'PYEOF'
import csv, sys

def load(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []

def num(row, key):
    try:
        return float(row.get(key, "") or "nan")
    except ValueError:
        return float("nan")

clkv = load(sys.argv[1])
torch = {(r["batch"], r["len"]): r for r in load(sys.argv[2])}
if clkv:
    r0 = clkv[0]
    print(f"\nclkv device: {r0.get('device')} ({r0.get('platform')}); streaming read "
          f"{num(r0, 'read_bw_gbps'):.0f} GB/s measured in the same run")
if torch:
    t0 = next(iter(torch.values()))
    print(f"torch {t0.get('torch')} on {t0.get('device')}, gqa={t0.get('gqa')}")
print("ratio = clkv us / torch us (below 1: clkv faster); probe us = the bandwidth probe "
      "reading the same bytes in one launch, timed like clkv\n")
hdr = f"{'B':>3} {'L':>7} {'KV MB':>8} | {'clkv us':>9} {'TB/s':>6} {'%readBW':>7} {'check':>6} | {'probe us':>9} | {'torch us':>9} {'TB/s':>6} | {'ratio':>6}"
print(hdr)
print("-" * len(hdr))
for r in clkv:
    key = (r["batch"], r["len"])
    t = torch.get(key, {})
    cu, tu = num(r, "median_us"), num(t, "median_us")
    kv_mb = num(r, "kv_bytes") * 1e-6
    ctb = num(r, "gbps") * 1e-3
    ttb = num(t, "tbps")
    ratio = cu / tu if tu == tu and tu > 0 else float("nan")
    status = r.get("check", "") if r.get("status") == "ok" else "ERROR"
    print(f"{r['batch']:>3} {r['len']:>7} {kv_mb:>8.1f} | {cu:>9.2f} {ctb:>6.3f} "
          f"{num(r, 'pct_read_bw'):>6.1f}% {status:>6} | {num(r, 'probe_same_bytes_us'):>9.2f} | "
          f"{tu:>9.2f} {ttb:>6.3f} | {ratio:>6.3f}")
    if r.get("status") != "ok":
        print(f"    clkv error: {r.get('error')}")
    if t and t.get("status") != "ok":
        print(f"    torch error: {t.get('error')}")
PYEOF
exit $clkv_rc
