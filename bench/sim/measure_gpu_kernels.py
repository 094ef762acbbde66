#!/usr/bin/env python3
"""Times, on one GPU, the kernels the simulator prices for the validation set (issue 35):
every GEMM of its rows' layers and LM heads in the three layouts a training step runs them
(forward, input gradient, weight gradient), square GEMMs from 256 to 16384 for the size curve,
causal fused attention at the rows' head counts and lengths, and the elementwise kernels of a
layer. PyTorch is the harness: its matmul is cuBLAS(Lt), the library Megatron-LM's and
Transformer Engine's GEMMs run on, and its scaled_dot_product_attention runs cuDNN's and
FlashAttention's fused kernels. Not a product dependency: it runs on a GPU machine that has
PyTorch, and its JSON output is committed (bench/sim/gpu_kernels_h200.json) and read by
bench/sim/fit_gemm_table.py.

  build/bench/sim/bench_published --gemm-shapes shapes.jsonl
  python3 bench/sim/measure_gpu_kernels.py shapes.jsonl --out kernels.json

Each timing is the median of per-call CUDA events, L2 flushed between calls (a training step's
weights and activations do not stay in L2 between one GEMM and the next).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

BF16_PEAK_TFLOPS = 989.0  # H100 / H200 SXM dense bf16 on tensor cores (datasheets)


def timed(fn, flush, min_reps=5, max_reps=40, budget_s=0.05):
    """Median seconds of fn() over reps, each between its own CUDA events, L2 flushed before."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    starts, ends = [], []
    began = time.perf_counter()
    while len(starts) < max_reps:
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        starts.append(start)
        ends.append(end)
        if len(starts) >= min_reps:
            torch.cuda.synchronize()
            if time.perf_counter() - began > budget_s:
                break
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e-3


def gemm_layouts(m, n, k, dtype):
    """A weight w[n, k] (nn.Linear's layout) and the three GEMMs of its layer's step."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    return {
        "forward": lambda: F.linear(x, w),          # [m, k] x [k, n]
        "input_grad": lambda: torch.mm(dy, w),      # [m, n] x [n, k]
        "weight_grad": lambda: torch.mm(dy.t(), x), # [n, m] x [m, k]
    }


def measure_gemms(shapes, flush, dtype):
    results = []
    seen = {}
    for shape in shapes:
        m = shape["tokens"] // shape["pieces"]
        n, k = shape["out"], shape["in"]
        key = (m, n, k)
        if key not in seen:
            layouts = gemm_layouts(m, n, k, dtype)
            seen[key] = {name: timed(fn, flush) for name, fn in layouts.items()}
            del layouts
            torch.cuda.empty_cache()
        flops = 2.0 * m * n * k
        for layout, seconds in seen[key].items():
            results.append({**shape, "m": m, "n": n, "k": k, "layout": layout,
                            "seconds": seconds, "gflops": flops * 1e-9,
                            "tflops": flops / seconds * 1e-12})
    return results


def measure_squares(flush, dtype):
    results = []
    for size in (256, 512, 1024, 2048, 4096, 8192, 16384):
        seconds = timed(gemm_layouts(size, size, size, dtype)["forward"], flush)
        flops = 2.0 * size ** 3
        results.append({"m": size, "n": size, "k": size, "layout": "forward",
                        "seconds": seconds, "gflops": flops * 1e-9,
                        "tflops": flops / seconds * 1e-12})
    return results


def measure_ladder(flush, dtype):
    """GEMMs of few tokens against a 4096-wide weight: where a GEMM stops filling the device."""
    results = []
    for m in (64, 128, 256, 512, 1024, 2048):
        for n, k in ((4096, 4096), (16384, 4096), (4096, 16384)):
            for layout, fn in gemm_layouts(m, n, k, dtype).items():
                seconds = timed(fn, flush)
                flops = 2.0 * m * n * k
                results.append({"m": m, "n": n, "k": k, "layout": layout, "seconds": seconds,
                                "gflops": flops * 1e-9, "tflops": flops / seconds * 1e-12})
    return results


def attention_grid():
    """Causal attention calls from small to large: head sizes 64 and 128, 1K-32K tokens,
    batch x heads from 4 to 64."""
    grid = []
    for head_dim in (64, 128):
        for sequence in (1024, 2048, 4096, 8192, 16384, 32768):
            for heads in (4, 8, 16, 32, 64):
                if heads * sequence <= 64 * 16384:
                    grid.append({"microbatch": 1, "heads": heads, "sequence": sequence,
                                 "head_dim": head_dim})
    return grid


def measure_sustained(shapes, flush, dtype, seconds=20):
    """A layer's forward and backward run back to back for `seconds`, as training runs them:
    its rate each second against the first second's, with the SM clock and power nvidia-smi
    reads meanwhile (a GPU at its power limit lowers its clock under sustained tensor work,
    which a kernel timed in bursts does not see)."""
    import threading
    results = []
    for shape in shapes:
        layer = measure_layer(shape, flush, dtype, keep=True)
        step = layer.pop("step")
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    line = subprocess.run(
                        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                         "--format=csv,noheader,nounits"], capture_output=True, text=True,
                        timeout=5).stdout.strip()
                    samples.append((time.perf_counter(), line))
                except (OSError, subprocess.SubprocessError):
                    pass
                stop.wait(1.0)

        thread = threading.Thread(target=sample)
        thread.start()
        began = time.perf_counter()
        seconds_rates = []
        while time.perf_counter() - began < seconds:
            start = time.perf_counter()
            count = 0
            while time.perf_counter() - start < 1.0:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                count += 5
            seconds_rates.append(count / (time.perf_counter() - start))
        stop.set()
        thread.join()
        results.append({**layer, "steps_per_s": seconds_rates,
                        "smi": [(round(t - began, 2), line) for t, line in samples]})
        print(f"sustained {shape['row']}: first second {seconds_rates[0]:.1f} layers/s, last "
              f"{seconds_rates[-1]:.1f}; burst {1 / (layer['forward_s'] + layer['backward_s']):.1f}"
              f"; clocks/power {[line for _, line in samples[::5]]}", flush=True)
        torch.cuda.empty_cache()
    return results


def measure_step(spec, dtype, steps=6):
    """A whole training step of a GPT on one GPU, as Megatron-LM's mixed precision runs it:
    bf16 weights and gradients, an fp32 master copy updated by fused AdamW, `microbatches`
    micro-batches of one sequence each accumulated, the untied LM head and the cross-entropy
    on fp32 logits, cuDNN's fused attention, dropout 0.1 after attention and MLP. Timed per
    part (the micro-batches' forward and backward, the update) over `steps` steps after two
    warm-up steps. The layout's communication is absent: a step of DP 1, TP 1, PP 1."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    layers, h, heads = spec["layers"], spec["hidden"], spec["heads"]
    s, vocab, microbatches = spec["sequence"], spec["vocab"], spec["microbatches"]
    d = h // heads

    def param(*shape, scale=0.02):
        return (torch.randn(*shape, device="cuda", dtype=dtype) * scale).requires_grad_()

    blocks = [{"ln1_w": param(h, scale=0) + 1, "ln1_b": param(h, scale=0),
               "qkv": param(3 * h, h), "qkv_b": param(3 * h, scale=0),
               "proj": param(h, h), "proj_b": param(h, scale=0),
               "ln2_w": param(h, scale=0) + 1, "ln2_b": param(h, scale=0),
               "fc1": param(4 * h, h), "fc1_b": param(4 * h, scale=0),
               "fc2": param(h, 4 * h), "fc2_b": param(h, scale=0)} for _ in range(layers)]
    for block in blocks:  # leaves: the "+ 1" made two of them results of an op
        for key in ("ln1_w", "ln2_w"):
            block[key] = block[key].detach().requires_grad_()
    wte, wpe, head = param(vocab, h), param(s, h), param(vocab, h)
    final_w = torch.ones(h, device="cuda", dtype=dtype, requires_grad=True)
    final_b = torch.zeros(h, device="cuda", dtype=dtype, requires_grad=True)
    params = [wte, wpe, head, final_w, final_b] + [p for b in blocks for p in b.values()]
    masters = [p.detach().float().clone() for p in params]
    optimizer = torch.optim.AdamW(masters, lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (microbatches, s + 1), device="cuda")

    def forward(mb):
        x = wte[tokens[mb, :s]] + wpe
        for b in blocks:
            a = F.layer_norm(x, (h,), b["ln1_w"], b["ln1_b"])
            qkv = F.linear(a, b["qkv"], b["qkv_b"]).view(1, s, 3, heads, d)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = o.transpose(1, 2).reshape(s, h)
            x = x + F.dropout(F.linear(o, b["proj"], b["proj_b"]), 0.1, True)
            m = F.layer_norm(x, (h,), b["ln2_w"], b["ln2_b"])
            m = F.gelu(F.linear(m, b["fc1"], b["fc1_b"]), approximate="tanh")
            x = x + F.dropout(F.linear(m, b["fc2"], b["fc2_b"]), 0.1, True)
        x = F.layer_norm(x, (h,), final_w, final_b)
        logits = F.linear(x, head).float()
        return F.cross_entropy(logits, tokens[mb, 1:s + 1])

    def update():
        for master, p in zip(masters, params):
            master.grad = p.grad.float()
            p.grad = None
        optimizer.step()
        for master, p in zip(masters, params):
            p.data.copy_(master)

    parts = {"microbatches": [], "update": [], "step": []}
    for step in range(steps + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for mb in range(microbatches):
            forward(mb).backward()
        torch.cuda.synchronize()
        middle = time.perf_counter()
        update()
        torch.cuda.synchronize()
        end = time.perf_counter()
        if step >= 2:
            parts["microbatches"].append(middle - start)
            parts["update"].append(end - middle)
            parts["step"].append(end - start)
    result = {**spec, "parameters": sum(p.numel() for p in params),
              **{f"{name}_s": statistics.median(values) for name, values in parts.items()},
              "steps_s": parts["step"],
              "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30}
    print(f"step {spec}: {result['step_s']:.4f} s (micro-batches {result['microbatches_s']:.4f},"
          f" update {result['update_s']:.4f}), {result['parameters'] / 1e9:.2f} B parameters, "
          f"peak {result['peak_gib']:.1f} GiB", flush=True)
    del blocks, params, masters, optimizer
    torch.cuda.empty_cache()
    return result


def measure_layer(shape, flush, dtype, keep=False):
    """One GPT layer's forward and backward on one TP rank of a row, as Megatron-LM with
    sequence parallelism computes it, the communication left out: LayerNorm and dropout on
    tokens/tp, the GEMMs on all tokens with weights split over TP (the all-gather a copy, the
    reduce-scatter a slice), cuDNN's fused causal attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tp, h = shape["tp"], shape["hidden"]
    b, s = shape["microbatch"], shape["sequence"]
    heads, head_dim = shape["heads"] // tp, h // shape["heads"]
    tokens = b * s
    local = tokens // tp

    def weight(n, k):
        return (torch.randn(n, k, device="cuda", dtype=dtype) * 0.02).requires_grad_()

    w_qkv, w_proj = weight(3 * h // tp, h), weight(h, h // tp)
    w_fc1, w_fc2 = weight(4 * h // tp, h), weight(h, 4 * h // tp)
    ln_w = [torch.ones(h, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2)]
    ln_b = [torch.zeros(h, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2)]
    x = torch.randn(local, h, device="cuda", dtype=dtype, requires_grad=True)
    grad = torch.randn(local, h, device="cuda", dtype=dtype)

    backend = [SDPBackend.CUDNN_ATTENTION]

    def forward():
        with sdpa_kernel(backend):
            a = F.layer_norm(x, (h,), ln_w[0], ln_b[0])
            a = torch.cat([a] * tp) if tp > 1 else a
            qkv = F.linear(a, w_qkv).view(b, s, 3, heads, head_dim)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = o.transpose(1, 2).reshape(tokens, heads * head_dim)
            r = F.dropout(F.linear(o, w_proj)[:local], 0.1, True) + x
            m = F.layer_norm(r, (h,), ln_w[1], ln_b[1])
            m = torch.cat([m] * tp) if tp > 1 else m
            m = F.linear(F.gelu(F.linear(m, w_fc1), approximate="tanh"), w_fc2)[:local]
            return F.dropout(m, 0.1, True) + r

    try:
        forward_s = timed(forward, flush)
    except RuntimeError:  # cuDNN declined these strides or this shape: FlashAttention's kernel
        backend[0] = SDPBackend.FLASH_ATTENTION
        forward_s = timed(forward, flush)
    both_s = timed(lambda: forward().backward(grad), flush)
    gemm_flops = 2.0 * tokens * 12 * h * h / tp
    attention_flops = 2 * 2.0 * b * heads * s * s * head_dim / 2
    result = {**{key: shape[key] for key in ("row", "gpu", "hidden", "heads", "tp", "sequence",
                                             "microbatch")},
            "attention": str(backend[0]), "forward_s": forward_s,
            "backward_s": both_s - forward_s,
            "gemm_gflops": gemm_flops * 1e-9, "attention_gflops": attention_flops * 1e-9,
            "model_tflops": 3 * (gemm_flops + attention_flops) / both_s * 1e-12}
    if keep:
        result["step"] = lambda: forward().backward(grad)
    return result


def measure_attention(shapes, flush, dtype):
    """Causal attention of a row's micro-batch on one TP rank: heads/tp heads of head size
    hidden/heads over `sequence` tokens, batch `microbatch`; FLOPs of the causal half
    (forward 2 GEMMs, backward 5, each 2·s²·d a head, halved)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    results = []
    for shape in shapes:
        b, a, s, d = shape["microbatch"], shape["heads"], shape["sequence"], shape["head_dim"]
        q, k, v = (torch.randn(b, a, s, d, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(b, a, s, d, device="cuda", dtype=dtype)
        forward_flops = 2 * 2.0 * b * a * s * s * d / 2
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    def forward():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    forward_s = timed(forward, flush)
                    out = forward()
                    backward_s = timed(lambda: torch.autograd.grad(out, (q, k, v), grad,
                                                                   retain_graph=True), flush)
            except Exception as error:  # a backend this build or device does not have
                results.append({**shape, "backend": name, "error": str(error)[:200]})
                continue
            results.append({**shape, "backend": name,
                            "forward_s": forward_s, "backward_s": backward_s,
                            "forward_tflops": forward_flops / forward_s * 1e-12,
                            "backward_tflops": 2.5 * forward_flops / backward_s * 1e-12,
                            "efficiency": 3.5 * forward_flops / (forward_s + backward_s)
                            * 1e-12 / BF16_PEAK_TFLOPS})
        del q, k, v, grad
        torch.cuda.empty_cache()
    return results


def measure_elementwise(tokens_hidden, flush, dtype):
    """A layer's HBM-bound kernels at [tokens, hidden]: bytes counted as each reads and writes
    once (2 bytes an element), so GB/s is the kernel's useful bandwidth."""
    results = []
    for tokens, hidden in tokens_hidden:
        x = torch.randn(tokens, hidden, device="cuda", dtype=dtype, requires_grad=True)
        r = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
        weight = torch.ones(hidden, device="cuda", dtype=dtype, requires_grad=True)
        bias = torch.zeros(hidden, device="cuda", dtype=dtype, requires_grad=True)
        ln = F.layer_norm(x, (hidden,), weight, bias)
        gelu = F.gelu(x, approximate="tanh")
        elements = tokens * hidden
        cases = [
            ("layer_norm forward", lambda: F.layer_norm(x, (hidden,), weight, bias), 2),
            ("layer_norm backward", lambda: torch.autograd.grad(ln, (x, weight, bias), r,
                                                                retain_graph=True), 3),
            ("gelu forward", lambda: F.gelu(x, approximate="tanh"), 2),
            ("gelu backward", lambda: torch.autograd.grad(gelu, x, r, retain_graph=True), 3),
            ("dropout + residual", lambda: F.dropout(x, 0.1, True) + r, 3),
        ]
        for name, fn, passes in cases:
            seconds = timed(fn, flush)
            results.append({"tokens": tokens, "hidden": hidden, "kernel": name,
                            "seconds": seconds,
                            "gbs": passes * 2.0 * elements / seconds * 1e-9})
        del x, r, ln, gelu
        torch.cuda.empty_cache()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", help="bench_published --gemm-shapes output")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--rows", default="", help="comma-separated row ids (default: all)")
    parser.add_argument("--parts", default="kernels,layers",
                        help="kernels (GEMMs, attention and elementwise at the rows' shapes), "
                        "layers (a whole layer of each row, GEMMs of few tokens, attention from "
                        "small to large), sustained (M1's and M8's layer back to back for 20 s each, "
                        "with clocks and power), step (a whole step of M1's model on one GPU); "
                        "default kernels,layers")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not torch.cuda.is_available():
        sys.exit("measure_gpu_kernels: no GPU found (torch.cuda.is_available() is false)")
    with open(args.shapes) as file:
        shapes = [json.loads(line) for line in file if line.strip()]
    if args.rows:
        wanted = set(args.rows.split(","))
        shapes = [shape for shape in shapes if shape["row"] in wanted]
    dtype = torch.bfloat16
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,"
                              "power.limit", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi unavailable"
    report = {"device": torch.cuda.get_device_name(), "nvidia_smi": smi,
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "cublas_tf32": torch.backends.cuda.matmul.allow_tf32, "dtype": "bf16"}
    began = time.perf_counter()

    def section(name, measure):
        """One part of the report, written out as soon as it is measured: a part that fails
        leaves the others."""
        try:
            report[name] = measure()
        except Exception as error:
            report[name] = []
            report.setdefault("errors", []).append(f"{name}: {error}")
            print(f"measure_gpu_kernels: {name} failed: {error}", flush=True)
        with open(args.out, "w") as file:
            json.dump(report, file, indent=1)
        print(f"{name}: {len(report[name])} entries, {time.perf_counter() - began:.1f} s",
              flush=True)

    if "kernels" in parts:
        section("squares", lambda: measure_squares(flush, dtype))
        section("gemms", lambda: measure_gemms(shapes, flush, dtype))

    # Attention and elementwise work at the rows' shapes (one entry per distinct shape).
    rows = {}
    for shape in shapes:
        # The layer, attention and elementwise parts build a GPT layer with every head its
        # own K and V on the whole sequence: rows of another layer, grouped-query attention or
        # context parallelism have their GEMMs timed above, not these.
        plain = (shape.get("architecture", "gpt") == "gpt" and shape.get("cp", 1) == 1
                 and shape.get("kv_heads", shape["heads"]) == shape["heads"])
        if plain:
            rows.setdefault(shape["row"], shape)
    attention_shapes, elementwise_shapes = [], []
    for shape in rows.values():
        hidden, heads = shape["hidden"], shape["heads"]
        entry = {"microbatch": shape["microbatch"], "heads": heads // shape["tp"],
                 "sequence": shape["sequence"], "head_dim": hidden // heads}
        if entry not in attention_shapes:
            attention_shapes.append(entry)
        pair = (shape["tokens"], hidden)
        if pair not in elementwise_shapes:
            elementwise_shapes.append(pair)
    if "kernels" in parts:
        section("attention", lambda: measure_attention(attention_shapes, flush, dtype))
        section("elementwise", lambda: measure_elementwise(elementwise_shapes, flush, dtype))
    if "step" in parts:
        # Megatron-LM README's M1 (24 layers of 2048, 16 heads, 4096 tokens, V = 131072, four
        # micro-batches a step on each DP rank), and a shallower one to part layers from the rest.
        m1 = {"layers": 24, "hidden": 2048, "heads": 16, "sequence": 4096, "vocab": 131072,
              "microbatches": 4}
        section("step", lambda: [measure_step(m1, dtype), measure_step({**m1, "layers": 12},
                                                                       dtype)])
    if "sustained" in parts:
        section("sustained", lambda: measure_sustained(
            [rows[row] for row in ("M1", "M8") if row in rows], flush, dtype))
    if "layers" in parts:
        section("layers", lambda: [measure_layer(shape, flush, dtype)
                                   for shape in rows.values()])
        section("ladder", lambda: measure_ladder(flush, dtype))
        section("attention_grid", lambda: measure_attention(attention_grid(), flush, dtype))

    print(f"\n{report['device']} ({smi}), torch {report['torch']}")
    for r in report.get("layers", []):
        print(f"layer {r['row']:4} tp{r['tp']} b{r['microbatch']} s{r['sequence']} "
              f"h{r['hidden']}: forward {1e3 * r['forward_s']:.3f} ms, backward "
              f"{1e3 * r['backward_s']:.3f} ms, {r['model_tflops']:.0f} TFLOP/s")
    for r in report.get("ladder", []):
        print(f"ladder {r['layout']:11} {r['m']:5} x {r['n']:5} x {r['k']:5}: "
              f"{r['tflops']:.0f} TFLOP/s")
    for r in report.get("attention_grid", []):
        if "error" not in r:
            print(f"attention grid {r['backend']:5} a{r['heads']} s{r['sequence']} "
                  f"d{r['head_dim']}: {100 * r['efficiency']:.1f}% of peak")
    if "kernels" not in parts:
        return
    print("square bf16 GEMMs:  " + "  ".join(
        f"{r['m']}: {r['tflops']:.0f}" for r in report["squares"]) + " TFLOP/s")
    print(f"{'row':4} {'gemm':5} {'m x n x k':>22} {'fwd':>6} {'dgrad':>6} {'wgrad':>6} TFLOP/s")
    by_key = {}
    for r in report["gemms"]:
        by_key.setdefault((r["row"], r["name"], r["m"], r["n"], r["k"]), {})[r["layout"]] = r
    for (row, name, m, n, k), layouts in by_key.items():
        print(f"{row:4} {name:5} {f'{m} x {n} x {k}':>22} "
              f"{layouts['forward']['tflops']:6.0f} {layouts['input_grad']['tflops']:6.0f} "
              f"{layouts['weight_grad']['tflops']:6.0f}")
    for r in report["attention"]:
        if "error" in r:
            print(f"attention {r['backend']}: {r['error']}")
        else:
            print(f"attention {r['backend']:5} b{r['microbatch']} a{r['heads']} s{r['sequence']} "
                  f"d{r['head_dim']}: fwd {r['forward_tflops']:.0f}, bwd "
                  f"{r['backward_tflops']:.0f} TFLOP/s, {100 * r['efficiency']:.1f}% of peak")
    for r in report["elementwise"]:
        print(f"{r['kernel']:20} [{r['tokens']}, {r['hidden']}]: {r['gbs']:.0f} GB/s")


if __name__ == "__main__":
    main()
