#!/usr/bin/env python3
"""PyTorch peer of `clkv bench minikv-prefill`.

Times torch.nn.functional.scaled_dot_product_attention for a causal prefill of one layer:
q [B, Hq, L, D], k/v [B, Hkv, L, D] on CUDA (is_causal=True, native GQA with
enable_gqa=True where available, else k/v expanded OUTSIDE the timed region), and reports
the median time per call and the attention TFLOP/s with the same FLOP count as the clkv
benchmark: 4*D per visible (query, key) pair, B*Hq*L*(L+1)/2 pairs. Method: `--repeats`
batches of `--iters` back-to-back calls, each timed with CUDA events, median of the
per-call means.

Example (the shape of `clkv bench minikv-prefill --len 8192 --heads 32 --dim 128`):
  python3 tools/bench_torch_prefill.py --len 8192 --heads 32 --kv-heads 8 --dim 128
"""
import argparse
import json
import statistics
import sys


def parse_args(argv):
    ap = argparse.ArgumentParser(description="PyTorch SDPA causal-prefill peer of "
                                 "`clkv bench minikv-prefill`.")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--len", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=32, help="query heads Hq")
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--iters", type=int, default=10, help="calls per timed batch")
    ap.add_argument("--repeats", type=int, default=9, help="timed batches (median reported)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backend", choices=["auto", "flash", "efficient", "cudnn", "math"],
                    default="flash", help="restrict SDPA to one backend (default: flash)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--format", choices=["text", "json"], default="text")
    args = ap.parse_args(argv)
    if args.heads % args.kv_heads != 0:
        ap.error("--heads must be a multiple of --kv-heads")
    return args


def backend_context(name):
    import contextlib
    if name == "auto":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        sys.exit("this PyTorch has no torch.nn.attention.sdpa_kernel; use --backend auto")
    table = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return sdpa_kernel([getattr(SDPBackend, table[name])])


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        print(f"bench_torch_prefill: PyTorch is not available ({exc})", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("bench_torch_prefill: CUDA is not available", file=sys.stderr)
        return 1
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    dev = torch.device(args.device)
    B, Hq, Hkv, L, D = args.batch, args.heads, args.kv_heads, args.len, args.dim
    gen = torch.Generator(device=dev).manual_seed(1234)
    q = torch.randn(B, Hq, L, D, device=dev, dtype=dt, generator=gen)
    k = torch.randn(B, Hkv, L, D, device=dev, dtype=dt, generator=gen)
    v = torch.randn(B, Hkv, L, D, device=dev, dtype=dt, generator=gen)
    gqa_native = True
    try:
        F.scaled_dot_product_attention(q[:, :, :16], k[:, :, :16], v[:, :, :16], is_causal=True,
                                       enable_gqa=True)
    except TypeError:
        gqa_native = False
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)

    def call():
        if gqa_native:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    with backend_context(args.backend):
        for _ in range(args.warmup):
            call()
        torch.cuda.synchronize()
        per_call = []
        for _ in range(args.repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.iters):
                call()
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) * 1e3 / args.iters)  # us
    med = statistics.median(per_call)
    flops = 4.0 * D * B * Hq * L * (L + 1) / 2.0
    rec = {"op": "torch-sdpa-causal-prefill", "device": torch.cuda.get_device_name(dev),
           "torch": torch.__version__, "backend": args.backend, "gqa_native": gqa_native,
           "dtype": args.dtype, "batch": B, "q_heads": Hq, "kv_heads": Hkv, "dim": D, "len": L,
           "median_us": med, "min_us": min(per_call), "tflops": flops / (med * 1e-6) * 1e-12}
    if args.format == "json":
        print(json.dumps([rec]))
    else:
        print(f"device: {rec['device']} | torch {rec['torch']} | backend {args.backend}"
              f"{'' if gqa_native else ' (k/v expanded to Hq heads)'}")
        print(f"causal prefill {args.dtype} B={B} Hq={Hq} Hkv={Hkv} D={D} L={L}: "
              f"median {med:.1f} us, min {rec['min_us']:.1f} us, {rec['tflops']:.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
