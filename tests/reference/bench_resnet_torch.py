#!/usr/bin/env python3
"""PyTorch peer of scalebench's ResNet benchmarks (configs/resnet50.yaml, configs/resnet152.yaml).

torchvision's resnet50 (v1.5) written out in plain torch.nn (resnet() below: 25,557,032
parameters, torchvision's names; no torchvision needed), trained as the preset trains it: channels_last (NHWC, as scalebench), bf16 autocast, SGD with momentum 0.875,
lr 0.256, weight decay 1/32768, random 224x224 images and labels, cuDNN with benchmark mode.
Eager and torch.compile. Each run: warm-up steps, then every measured step between two CUDA
events; median/min/max ms, samples/s = batch / median.

  python3 tests/reference/bench_resnet_torch.py --run eager:256 --run compile:256 --out torch_resnet.jsonl
  python3 tests/reference/bench_resnet_torch.py --model resnet152 --run compile:128 --out torch_resnet.jsonl
  python3 tests/reference/bench_resnet_torch.py --table OUTDIR   (launch/bench_resnet.sh's side-by-side table)
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics


def resnet(blocks=(3, 4, 6, 3), width=64, num_classes=1000, bn_eps=1e-5):
    """torchvision's bottleneck ResNet (v1.5: the stride on the 3x3 convolution) written out, so the
    same code builds any shape scalebench's resnet: section takes; resnet() has torchvision
    resnet50's 25,557,032 parameters and its state_dict names."""
    import torch.nn as nn

    def bn(c):
        return nn.BatchNorm2d(c, eps=bn_eps)

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = bn(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = bn(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = bn(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = bn(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            inplanes = width
            for stage, count in enumerate(blocks):
                planes, stride = width << stage, 1 if stage == 0 else 2
                downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), bn(planes * 4))
                layer = [Bottleneck(inplanes, planes, stride, downsample)]
                inplanes = planes * 4
                layer += [Bottleneck(inplanes, planes, 1, None) for _ in range(count - 1)]
                setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
            self.stages = len(blocks)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(inplanes, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for stage in range(self.stages):
                x = getattr(self, f"layer{stage + 1}")(x)
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet()


# blocks per stage and torchvision's parameter count of each model
MODELS = {"resnet50": ((3, 4, 6, 3), 25557032), "resnet152": ((3, 8, 36, 3), 60192808)}


def bench(model_name, mode, batch, steps, warmup):
    import torch
    torch.backends.cudnn.benchmark = True
    blocks, want = MODELS[model_name]
    model = resnet(blocks)
    params = sum(p.numel() for p in model.parameters())
    assert params == want, f"{params} parameters, torchvision's {model_name} has {want:,}"
    model = model.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.256, momentum=0.875, weight_decay=1.0 / 32768)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    if mode == "compile":
        step = torch.compile(step)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    median = statistics.median(times)
    return {"tool": "torch", "model": model_name, "parameters": params, "mode": mode,
            "batch": batch, "precision": "bf16", "steps": steps, "warmup": warmup, "step_ms_median": median,
            "step_ms_min": min(times), "step_ms_max": max(times), "samples_per_s": batch / median * 1e3,
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(), "time": datetime.datetime.now(datetime.timezone.utc).isoformat()}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(outdir):
    """scalebench's records (scalebench_MODEL_ENGINE_bBATCH.jsonl) beside torch.jsonl's, per model and batch:
    samples/s (median step), MFU, and scalebench / torch for eager and torch.compile."""
    torch_rows = {}
    if os.path.exists(os.path.join(outdir, "torch.jsonl")):
        for r in read_jsonl(os.path.join(outdir, "torch.jsonl")):
            torch_rows[(r["model"], r["batch"], r["mode"])] = r  # the latest of each run
    sb_rows = {}
    for path in glob.glob(os.path.join(outdir, "scalebench_*_b*.jsonl")):
        m = re.fullmatch(r"scalebench_(resnet[0-9]+)_([a-z0-9]+)_b([0-9]+)\.jsonl", os.path.basename(path))
        recs = [r for r in read_jsonl(path) if r.get("subcommand") == "train"] if m else []
        if recs:
            sb_rows[(m.group(1), int(m.group(3)), m.group(2))] = recs[-1]
    gpu = next((r["gpu"] for r in torch_rows.values()), "?")
    print(f"images/s, bf16, channels_last / NHWC, one GPU ({gpu}); ratio = scalebench / torch")
    print("| model | batch | conv engine | scalebench | step ms | MFU | torch eager | torch.compile | vs eager | vs compile |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    for (model, batch, engine), r in sorted(sb_rows.items(), key=lambda kv: (list(MODELS).index(kv[0][0]), kv[0][1], kv[0][2])):
        s = r["samples_per_s"]
        eager = torch_rows.get((model, batch, "eager"), {}).get("samples_per_s")
        comp = torch_rows.get((model, batch, "compile"), {}).get("samples_per_s")
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
        print(f"| {model} | {batch} | {r.get('conv_engine') or engine} | {s:.1f} | {r['step_ms']['median']:.2f} | {mfu} | "
              f"{f'{eager:.1f}' if eager else '-'} | {f'{comp:.1f}' if comp else '-'} | {ratio(s, eager)} | {ratio(s, comp)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet50")
    ap.add_argument("--run", action="append", default=[], help="eager|compile:BATCH (repeatable)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", help="JSONL file the records are appended to")
    ap.add_argument("--table", metavar="OUTDIR", help="print launch/bench_resnet.sh's side-by-side table and exit")
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return
    if not args.out:
        raise SystemExit("--out is required (or --table OUTDIR)")
    for text in args.run or ["eager:256"]:
        m = re.fullmatch(r"(eager|compile):([0-9]+)", text)
        if not m:
            raise SystemExit(f"--run '{text}': expected eager|compile:BATCH")
        record = bench(args.model, m.group(1), int(m.group(2)), args.steps, args.warmup)
        print(json.dumps(record), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
