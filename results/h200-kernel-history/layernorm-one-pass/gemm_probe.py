"""The transformer presets' weight-gradient GEMMs (dW = dY^T X over all tokens, bf16, fp32
accumulation) in torch's cuBLAS, and their bias gradients (dY's column sums) as torch computes
them apart: median of 20 CUDA-event timings each. Tells what the products cost without a
bias-gradient epilogue, against scalebench's op profile of the same shapes with one."""
import statistics, torch
def timed(fn):
    for _ in range(5): fn()
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
for name, tokens, hidden, ffn in (("bert-base b256", 32768, 768, 3072), ("bert-large b256", 32768, 1024, 4096),
                                  ("gpt2-medium b8", 8192, 1024, 4096)):
    for out, inp in ((3 * hidden, hidden), (hidden, hidden), (ffn, hidden), (hidden, ffn)):
        dy = torch.randn(tokens, out, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(tokens, inp, device="cuda", dtype=torch.bfloat16)
        mm = timed(lambda: torch.mm(dy.t(), x))
        bias = timed(lambda: dy.sum(0, dtype=torch.float32))
        flop = 2 * tokens * out * inp
        print(f"{name}: gemm {out}x{inp}x{tokens} TN {mm:.4f} ms ({flop / mm / 1e9:.0f} TFLOP/s), "
              f"bias_grad {tokens}x{out} {bias:.4f} ms", flush=True)
