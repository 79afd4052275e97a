#!/usr/bin/env bash
# Profile one OpenCL kernel of a clkv command with Nsight Compute (NVIDIA GPU machine):
#   tools/profile/profile_kernel.sh KERNEL OUTDIR command [args...]
# Runs the command with cl_capture preloaded (launch CAP_NTH of KERNEL, default 5, is
# recorded), replays the launch through the CUDA driver (cuda_replay: registers, median
# time), then profiles one replayed launch with ncu (--set full, clocks left alone) and
# writes OUTDIR/details.txt (sections), OUTDIR/raw.csv (every metric) and OUTDIR/sass.csv
# (per-instruction executions and stall samples).
# Environment: CUDA (default /usr/local/cuda), NCU (default: ncu on PATH or in $CUDA/bin),
# OPENCL_INCLUDE (directory with CL/cl.h), CAP_NTH, CAP_MAXSAVE (see cl_capture.c),
# TIME_LIMIT (seconds for the replay and for ncu each, default 300; a replay that reads
# the grid wrongly can loop forever, as score_window_mma did before cuda_replay set
# get_num_groups, see there).
# Example: tools/profile/profile_kernel.sh attention_quant_mma_partial /tmp/q2 \
#     build-gpu/tools/clkv bench attention-quant --device nvidia --bits 2 --group 128 \
#     --batch 1 --len 131072 --iters 5 --repeats 1 --no-baseline
set -euo pipefail
if [[ $# -lt 3 ]]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi
KERNEL=$1 OUTDIR=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA=${CUDA:-/usr/local/cuda}
NCU=${NCU:-$(command -v ncu || echo "$CUDA/bin/ncu")}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUTDIR"
gcc -O2 -Wall -Wextra -shared -fPIC -o "$WORK/cl_capture.so" "$HERE/cl_capture.c" \
    ${OPENCL_INCLUDE:+-I"$OPENCL_INCLUDE"} -ldl
gcc -O2 -Wall -Wextra -o "$WORK/cuda_replay" "$HERE/cuda_replay.c" -I"$CUDA/include" \
    -L"$CUDA/lib64/stubs" -lcuda
CAP_KERNEL=$KERNEL CAP_DIR="$WORK/cap" LD_PRELOAD="$WORK/cl_capture.so" "$@" >"$OUTDIR/command.txt" 2>&1
[[ -f "$WORK/cap/manifest.txt" ]] || { echo "no launch of $KERNEL was captured" >&2; exit 1; }
cp "$WORK/cap/manifest.txt" "$OUTDIR/"
LIMIT=${TIME_LIMIT:-300}
timeout "$LIMIT" "$WORK/cuda_replay" "$WORK/cap" 20 | tee "$OUTDIR/replay.txt"
timeout "$LIMIT" "$NCU" --clock-control none --set full --import-source no -c 1 -f -o "$WORK/rep" \
    "$WORK/cuda_replay" "$WORK/cap" 1 >"$OUTDIR/ncu.txt" 2>&1
"$NCU" -i "$WORK/rep.ncu-rep" --page details --print-units base >"$OUTDIR/details.txt"
"$NCU" -i "$WORK/rep.ncu-rep" --page raw --csv >"$OUTDIR/raw.csv"
"$NCU" -i "$WORK/rep.ncu-rep" --page source --print-source sass --csv >"$OUTDIR/sass.csv"
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy" "$OUTDIR/details.txt" || true
