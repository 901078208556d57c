"""The ResNet stem's convolution (7x7, stride 2, pad 3, 64 filters, batch 256 of 224x224 images,
bf16, channels_last) in torch's cuDNN (benchmark mode) with the input's 3 channels zero-padded to
C: forward and the filter gradient alone, median of 20 CUDA-event timings each. Tells which
channel padding cuDNN runs fastest; the FLOPs quoted are the real 3-channel convolution's."""
import statistics, torch
torch.backends.cudnn.benchmark = True
F = 2 * 256 * 112 * 112 * 64 * 7 * 7 * 3
def timed(fn):
    for _ in range(5): fn()
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
for c in (3, 4, 8):
    x = torch.randn(256, c, 224, 224, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, c, 7, 7, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x, w, stride=2, padding=3)
    dy = torch.randn_like(y)
    fwd = timed(lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=3))
    wgrad = timed(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1,
                                                            [False, True, False]))
    print(f"channels {c}: forward {fwd:.3f} ms ({F / fwd / 1e9:.0f} TFLOP/s real), "
          f"filter gradient {wgrad:.3f} ms ({F / wgrad / 1e9:.0f} TFLOP/s real)", flush=True)
