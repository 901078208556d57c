#!/usr/bin/env python3
"""PyTorch peer of scalebench's ResNet-50 benchmark (configs/resnet50.yaml).

torchvision's resnet50 (v1.5) when torchvision is installed, else the same network written out
below (its parameter count is printed and must be 25,557,032 either way), trained as the preset
trains it: channels_last (NHWC, as scalebench), bf16 autocast, SGD with momentum 0.875,
lr 0.256, weight decay 1/32768, random 224x224 images and labels, cuDNN with benchmark mode.
Eager and torch.compile. Each run: warm-up steps, then every measured step between two CUDA
events; median/min/max ms, samples/s = batch / median.

  python3 tests/reference/bench_resnet_torch.py --run eager:256 --run compile:256 --out torch_resnet.jsonl
"""
import argparse
import datetime
import json
import re
import statistics


def build_resnet50():
    import torch.nn as nn
    try:
        import torchvision
        return torchvision.models.resnet50(), "torchvision.models.resnet50"
    except ImportError:
        pass

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, inplanes = [], 64
            for stage, blocks in enumerate([3, 4, 6, 3]):
                planes, stride = 64 << stage, 1 if stage == 0 else 2
                downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
                stage_blocks = [Bottleneck(inplanes, planes, stride, downsample)]
                inplanes = planes * 4
                stage_blocks += [Bottleneck(inplanes, planes, 1, None) for _ in range(blocks - 1)]
                layers.append(nn.Sequential(*stage_blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet50(), "written out (torchvision not installed)"


def bench(mode, batch, steps, warmup):
    import torch
    torch.backends.cudnn.benchmark = True
    model, source = build_resnet50()
    params = sum(p.numel() for p in model.parameters())
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
    return {"tool": "torch", "model": "resnet50", "model_source": source, "parameters": params, "mode": mode,
            "batch": batch, "precision": "bf16", "steps": steps, "warmup": warmup, "step_ms_median": median,
            "step_ms_min": min(times), "step_ms_max": max(times), "samples_per_s": batch / median * 1e3,
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(), "time": datetime.datetime.now(datetime.timezone.utc).isoformat()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", default=[], help="eager|compile:BATCH (repeatable)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True, help="JSONL file the records are appended to")
    args = ap.parse_args()
    for text in args.run or ["eager:256"]:
        m = re.fullmatch(r"(eager|compile):([0-9]+)", text)
        if not m:
            raise SystemExit(f"--run '{text}': expected eager|compile:BATCH")
        record = bench(m.group(1), int(m.group(2)), args.steps, args.warmup)
        print(json.dumps(record), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
