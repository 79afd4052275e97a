#!/usr/bin/env python3
"""PyTorch peer of `clkv bench attention-decode`.

Times torch.nn.functional.scaled_dot_product_attention for one decode step:
q [B, Hq, 1, D], k/v [B, Hkv, L, D] on CUDA, and reports the median time per call and the
K+V read bandwidth (B*Hkv*L*D*2*element bytes / time), the same quantities and the same
method as the clkv benchmark: `--repeats` batches of `--iters` back-to-back calls, each
batch timed with CUDA events, median (and min) of the per-call means.

GQA: with enable_gqa=True when this PyTorch has it (2.5+); otherwise k/v are expanded with
repeat_interleave to Hq heads OUTSIDE the timed region, and the output says so (the
kernel then reads G times more K/V than the bytes reported).

Examples:
  python3 tools/bench_torch_decode.py --batch 1,8 --len 4096,32768,131072
  python3 tools/bench_torch_decode.py --format json
"""
import argparse
import json
import statistics
import sys


def int_list(text):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': values must be positive")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="PyTorch SDPA decode-attention peer of `clkv bench attention-decode`.")
    ap.add_argument("--batch", type=int_list, default=[1], help="B list, e.g. 1,8")
    ap.add_argument("--len", type=int_list, default=[32768], help="L list, e.g. 4096,32768")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--iters", type=int, default=100, help="calls per timed batch")
    ap.add_argument("--repeats", type=int, default=15, help="timed batches (median reported)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--backend", choices=["auto", "flash", "efficient", "cudnn", "math"],
                    default="auto", help="restrict SDPA to one backend (default: torch picks)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--format", choices=["text", "json", "csv"], default="text")
    args = ap.parse_args(argv)
    if args.q_heads % args.kv_heads != 0:
        ap.error("--q-heads must be a multiple of --kv-heads")
    return args


def backend_context(torch, name):
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
        print(f"bench_torch_decode: PyTorch is not available ({exc})", file=sys.stderr)
        return 1

    if not torch.cuda.is_available():
        print("bench_torch_decode: CUDA is not available", file=sys.stderr)
        return 1
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    elem = {"bf16": 2, "f16": 2, "f32": 4}[args.dtype]
    dev = torch.device(args.device)
    Hq, Hkv, D = args.q_heads, args.kv_heads, args.dim
    G = Hq // Hkv
    gpu_name = torch.cuda.get_device_name(dev)

    # Does this PyTorch accept enable_gqa?
    native_gqa = True
    if G > 1:
        try:
            q0 = torch.zeros(1, Hq, 1, D, device=dev, dtype=dtype)
            k0 = torch.zeros(1, Hkv, 4, D, device=dev, dtype=dtype)
            F.scaled_dot_product_attention(q0, k0, k0, enable_gqa=True)
        except TypeError:
            native_gqa = False
    gqa_mode = "native" if (G == 1 or native_gqa) else "repeat_interleave"
    if gqa_mode == "repeat_interleave":
        print("bench_torch_decode: this PyTorch has no enable_gqa; k/v are expanded with "
              "repeat_interleave outside the timed region (the kernel reads G times more "
              "K/V than the bytes reported)", file=sys.stderr)

    records = []
    for B in args.batch:
        for L in args.len:
            rec = {"op": "attention-decode", "impl": "torch-sdpa", "device": gpu_name,
                   "torch": torch.__version__, "dtype": args.dtype, "batch": B, "q_heads": Hq,
                   "kv_heads": Hkv, "dim": D, "len": L, "iters": args.iters,
                   "repeats": args.repeats, "gqa": gqa_mode, "backend": args.backend}
            kv_bytes = B * Hkv * L * D * 2 * elem
            rec["kv_bytes"] = kv_bytes
            try:
                gen = torch.Generator(device=dev).manual_seed(1234 + B * 7 + L)
                q = torch.randn(B, Hq, 1, D, device=dev, dtype=dtype, generator=gen)
                k = torch.randn(B, Hkv, L, D, device=dev, dtype=dtype, generator=gen)
                v = torch.randn(B, Hkv, L, D, device=dev, dtype=dtype, generator=gen)
                kwargs = {}
                if G > 1 and native_gqa:
                    kwargs["enable_gqa"] = True
                elif G > 1:
                    k = k.repeat_interleave(G, dim=1)
                    v = v.repeat_interleave(G, dim=1)
                with backend_context(torch, args.backend), torch.no_grad():
                    for _ in range(args.warmup + 1):
                        F.scaled_dot_product_attention(q, k, v, **kwargs)
                    torch.cuda.synchronize(dev)
                    per_call = []
                    for r in range(args.repeats):
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(args.iters):
                            F.scaled_dot_product_attention(q, k, v, **kwargs)
                        end.record()
                        end.synchronize()
                        per_call.append(start.elapsed_time(end) * 1e3 / args.iters)  # us
                med = statistics.median(per_call)
                best = min(per_call)
                rec.update({"median_us": med, "min_us": best,
                            "tbps": kv_bytes / (med * 1e-6) * 1e-12,
                            "tbps_best": kv_bytes / (best * 1e-6) * 1e-12,
                            "status": "ok", "error": ""})
                del q, k, v
                torch.cuda.empty_cache()
            except Exception as exc:  # report the shape and go on (e.g. out of memory)
                rec.update({"median_us": None, "min_us": None, "tbps": None,
                            "tbps_best": None, "status": "error", "error": str(exc)[:200]})
                torch.cuda.empty_cache()
            records.append(rec)
            if args.format == "text":
                if rec["status"] == "ok":
                    print(f"B={B} L={L} Hq={Hq} Hkv={Hkv} D={D} {args.dtype}: "
                          f"median {rec['median_us']:.2f} us (min {rec['min_us']:.2f}), "
                          f"{rec['tbps']:.3f} TB/s of K+V [gqa={gqa_mode}]", flush=True)
                else:
                    print(f"B={B} L={L}: error: {rec['error']}", flush=True)
            else:
                print(f"[torch] B={B} L={L} done", file=sys.stderr, flush=True)

    if args.format == "json":
        json.dump(records, sys.stdout, indent=1)
        print()
    elif args.format == "csv":
        keys = list(records[0].keys()) if records else []
        print(",".join(keys))
        for rec in records:
            cells = []
            for key in keys:
                val = rec[key]
                text = "" if val is None else (f"{val:.6g}" if isinstance(val, float) else str(val))
                if any(c in text for c in ',"\n'):
                    text = '"' + text.replace('"', '""') + '"'
                cells.append(text)
            print(",".join(cells))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
