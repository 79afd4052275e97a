#!/usr/bin/env python3
"""PyTorch peer of `clkv bench dropkv`: the straightforward (materialized) DropKV step.

The formula of SPEC §2.1, written the way the paper's PyTorch baseline does it: expand
K/V to the query heads (repeat_interleave), materialize the window attention [B, Hq, W, L]
in f32 (causal for the last W keys), a = P V, the squared distances
||a||^2 + ||v||^2 - 2 <a, v> as a [B, Hq, W, L] tensor, the weight (p / (1 - p + eps))^2,
the sum over the window, the mean over the GQA group, avg_pool1d (kernel 11, zero padding
counted), protection of the last W tokens and topk of keep = max(int(ratio * L), W) tokens.

Timing as the clkv benchmarks: `--repeats` batches of `--iters` back-to-back calls, each
batch timed with CUDA events; the median (and min) of the per-call means. The K/V expansion
is part of the timed step (the baseline re-expands the cache per call).

Example:
  python3 tools/bench_torch_dropkv.py --len 16384,131072 --window 8
"""
import argparse
import statistics
import sys


def int_list(text):
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': expected positive integers")
    return values


def main(argv):
    ap = argparse.ArgumentParser(description="PyTorch materialized DropKV step (peer of clkv bench dropkv)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--len", type=int_list, default=[16384, 131072])
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--ratio", type=float, default=0.1)
    ap.add_argument("--kernel", type=int, default=11)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("bench_torch_dropkv.py: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_torch_dropkv.py: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    B, Hq, Hkv, D, W = args.batch, args.q_heads, args.kv_heads, args.dim, args.window
    G = Hq // Hkv
    eps = 1e-6
    print(f"device: {torch.cuda.get_device_name(0)} | torch {torch.__version__}")
    print(f"torch dropkv (materialized): bf16 B={B} Hq={Hq} Hkv={Hkv} D={D} W={W}, "
          f"{args.iters} iters x {args.repeats} repeats")
    print(f"{'B':>5} {'L':>8} {'W':>8} {'median_us':>11} {'min_us':>11}")
    for L in args.len:
        g = torch.Generator(device=dev).manual_seed(1234)
        q = torch.randn(B, Hq, W, D, device=dev, generator=g).to(torch.bfloat16)
        k = torch.randn(B, Hkv, L, D, device=dev, generator=g).to(torch.bfloat16)
        v = torch.randn(B, Hkv, L, D, device=dev, generator=g).to(torch.bfloat16)
        pos_q = torch.arange(L - W, L, device=dev).view(W, 1)
        pos_k = torch.arange(L, device=dev).view(1, L)
        mask = pos_k > pos_q  # [W, L]: keys after the query's position
        keep = max(int(args.ratio * L), W, 1)

        def step():
            kf = k.repeat_interleave(G, dim=1).float()  # [B, Hq, L, D]
            vf = v.repeat_interleave(G, dim=1).float()
            z = torch.matmul(q.float(), kf.transpose(-1, -2)) / (D ** 0.5)  # [B, Hq, W, L]
            z = z.masked_fill(mask, float("-inf"))
            p = torch.softmax(z, dim=-1)
            a = torch.matmul(p, vf)  # [B, Hq, W, D]
            d2 = (a * a).sum(-1, keepdim=True) + (vf * vf).sum(-1).unsqueeze(2) \
                - 2.0 * torch.matmul(a, vf.transpose(-1, -2))
            d2 = d2.clamp_min(0.0)
            pc = p.clamp(0.0, 1.0)
            w = (pc / (1.0 - pc + eps)) ** 2
            s = (w * d2).sum(2)  # [B, Hq, L]
            s = s.view(B, Hkv, G, L).mean(2)
            s = F.avg_pool1d(s, args.kernel, stride=1, padding=args.kernel // 2,
                             count_include_pad=True)
            s[..., L - W:] = float("inf")
            idx = torch.topk(s, keep, dim=-1).indices.sort(dim=-1).values
            return idx

        for _ in range(2):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(args.iters):
                step()
            t1.record()
            torch.cuda.synchronize()
            times.append(t0.elapsed_time(t1) * 1000.0 / args.iters)
        print(f"{B:>5} {L:>8} {W:>8} {statistics.median(times):>11.1f} {min(times):>11.1f}")
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
