#!/usr/bin/env python3
"""PyTorch reference for scalebench's transformer and ResNet: one forward+backward, same weights, same batch.

scalebench_export_step (tests/reference/export_step.cpp) writes a config's initial parameters,
one batch and its own loss and per-parameter gradient L2 norms. This script loads the same
parameters by name into Hugging Face's BertForMaskedLM or GPT2LMHeadModel (config from
params.json's shapes; dropout 0) or torchvision's ResNet (written out in
tests/reference/bench_resnet_torch.py; NCHW, BatchNorm in training mode, as torch trains it),
runs the same batch in fp32 and under bf16 autocast, and
prints, per parameter, scalebench's gradient norm, torch's at the export's precision and the
relative error, with pass/fail. Exit status 1 when any row fails.

Tolerances (relative): fp32 export against torch fp32 (TF32 off): loss 1e-4, gradient norms
1e-3. bf16 export against torch bf16 autocast: loss 2e-2, gradient norms 5e-2 (bf16 keeps 8
significant bits, 2^-8 = 0.4% per rounding; the torch bf16-vs-fp32 column shows the size of
the error bf16 itself makes on this model). The same step in float64 is the exact answer: a row
beyond the tolerance still passes when scalebench is within twice torch's own largest distance
from float64 at the same precision on this step, over the quantities of its kind (the loss; vector
parameters: norm gains and biases; matrices) ("as torch": ill-conditioned gradients, e.g. a
ResNet's BatchNorm parameters, whose fp32 values differ from float64 by up to 4e-3 in torch, and
as much in scalebench's CPU backend, which sums in another order).

  # on the GPU machine, from the build folder of a CUDA build:
  ./tests/scalebench_export_step --config ../configs/bert-base.yaml --backend cuda --precision fp32 --dir /tmp/ref-fp32
  ./tests/scalebench_export_step --config ../configs/bert-base.yaml --backend cuda --precision bf16 --dir /tmp/ref-bf16
  python3 ../tests/reference/torch_transformer_check.py /tmp/ref-fp32
  python3 ../tests/reference/torch_transformer_check.py /tmp/ref-bf16 --json ../results/torch_check_bert-base_bf16.json
  # the CPU backend (the reference the CUDA one is checked against), and perturbed weights so
  # every parameter moves the loss:
  ./tests/scalebench_export_step --config ../configs/bert-base.yaml --backend cpu --batch 2 --perturb 0.05 --dir /tmp/ref-cpu
  python3 ../tests/reference/torch_transformer_check.py /tmp/ref-cpu
"""
import argparse
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOLERANCES = {"fp32": (1e-4, 1e-3), "tf32": (1e-3, 1e-2), "bf16": (2e-2, 5e-2), "fp16": (1e-2, 5e-2)}


def load(folder):
    with open(os.path.join(folder, "params.json")) as f:
        meta = json.load(f)
    with open(os.path.join(folder, "step.json")) as f:
        step = json.load(f)
    flat = np.fromfile(os.path.join(folder, "params.bin"), dtype=np.float32)
    if flat.size != meta["num_params"]:
        sys.exit(f"params.bin holds {flat.size} floats, params.json says {meta['num_params']}")
    m = meta["model"]
    if m["arch"] == "resnet":  # inputs: NHWC fp32 images; labels: one class per image
        shape = (step["batch"], m["image_size"], m["image_size"], 3)
        inputs = np.fromfile(os.path.join(folder, "images.bin"), dtype=np.float32).reshape(shape)
        labels = np.fromfile(os.path.join(folder, "labels.bin"), dtype=np.int32)
        return meta, step, flat, inputs, labels
    shape = (step["batch"], step["seq_len"])
    ids = np.fromfile(os.path.join(folder, "ids.bin"), dtype=np.int32).reshape(shape)
    labels = np.fromfile(os.path.join(folder, "labels.bin"), dtype=np.int32).reshape(shape)
    return meta, step, flat, ids, labels


def build_model(m):
    """The Hugging Face model (dropout 0) or the ResNet of params.json's shape, in fp32."""
    if m["arch"] == "resnet":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_resnet_torch import resnet
        return resnet(tuple(m["blocks"]), m["width"], m["num_classes"], m["bn_eps"])
    if m["arch"] == "bert":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(vocab_size=m["vocab"], hidden_size=m["hidden"], num_hidden_layers=m["layers"],
                         num_attention_heads=m["heads"], intermediate_size=m["ffn"], hidden_act="gelu",
                         max_position_embeddings=m["max_positions"], type_vocab_size=m["type_vocab"],
                         layer_norm_eps=m["layernorm_eps"], hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, attn_implementation="eager")
        model = BertForMaskedLM(cfg)
        # scalebench has no padding token: HF's padding_idx would zero row 0's gradient.
        model.bert.embeddings.word_embeddings.padding_idx = None
    else:
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(vocab_size=m["vocab"], n_positions=m["max_positions"], n_embd=m["hidden"],
                         n_layer=m["layers"], n_head=m["heads"], n_inner=m["ffn"],
                         activation_function="gelu_new", layer_norm_epsilon=m["layernorm_eps"],
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
        model = GPT2LMHeadModel(cfg)
    # attn_implementation="eager": the plain softmax(Q K^T) V that scalebench computes.
    return model


def copy_params(model, meta, flat):
    named = dict(model.named_parameters())  # tied tensors appear once, under their first name
    ours = {p["name"] for p in meta["params"]}
    missing = sorted(set(named) - ours)
    extra = sorted(ours - set(named))
    if missing or extra:
        sys.exit(f"parameter names differ from Hugging Face's: not exported {missing[:5]}, unknown {extra[:5]}")
    with torch.no_grad():
        for p in meta["params"]:
            t = torch.from_numpy(flat[p["offset"]:p["offset"] + p["rows"] * p["cols"]].copy())
            t = t.reshape(p["rows"], p["cols"])
            if p["hf_transposed"]:  # GPT-2 Conv1D stores [in, out]; scalebench [out, in]
                t = t.t()
            target = named[p["name"]]
            if target.dim() == 4:  # a convolution: scalebench [out, ky, kx, in], torch [out, in, ky, kx]
                out, cin, kh, kw = target.shape
                t = t.reshape(out, kh, kw, cin).permute(0, 3, 1, 2)
            if target.dim() == 1:
                t = t.reshape(-1)
            if tuple(t.shape) != tuple(target.shape):
                sys.exit(f"{p['name']}: exported shape {tuple(t.shape)}, HF wants {tuple(target.shape)}")
            target.copy_(t)


def step(model, inputs, labels, vocab, device, bf16, dtype=torch.float32):
    """vocab: the transformer's vocabulary; None for the ResNet, whose inputs are NHWC images.
    dtype: of the images (the model's own is the caller's: float64 for the reference)."""
    model.zero_grad(set_to_none=True)
    labels_t = torch.from_numpy(labels.astype(np.int64)).to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
        if vocab is None:
            images = torch.from_numpy(inputs).to(device, dtype).permute(0, 3, 1, 2)
            images = images.contiguous(memory_format=torch.channels_last)
            logits = model(images)
        else:
            logits = model(input_ids=torch.from_numpy(inputs.astype(np.int64)).to(device)).logits
    logits = logits.to(torch.float64 if dtype == torch.float64 else torch.float32)
    if vocab is None:
        loss = F.cross_entropy(logits, labels_t)
    else:
        # The mean over labelled positions only (label -1 elsewhere), as scalebench's loss.
        loss = F.cross_entropy(logits.reshape(-1, vocab), labels_t.reshape(-1), ignore_index=-1)
    loss.backward()
    norms = {n: (p.grad.double().norm().item() if p.grad is not None else 0.0) for n, p in model.named_parameters()}
    return loss.item(), norms


ZERO_GRADIENT_FLOOR = 1e-5  # of the model's largest gradient norm


def rel(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the --dir of scalebench_export_step")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="also write the table as JSON here (for results/)")
    args = ap.parse_args()
    meta, exported, flat, ids, labels = load(args.folder)
    precision = exported["precision"]
    loss_tol, grad_tol = TOLERANCES[precision]
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"

    model = build_model(meta["model"]).to(args.device)
    copy_params(model, meta, flat)
    model.train()  # dropout is 0 anyway; train() as a training step would
    vocab = meta["model"].get("vocab")  # None: the ResNet
    loss32, norms32 = step(model, ids, labels, vocab, args.device, bf16=False)
    loss16, norms16 = step(model, ids, labels, vocab, args.device, bf16=True)
    ref_loss, ref_norms = (loss16, norms16) if precision in ("bf16", "fp16") else (loss32, norms32)
    # The exact answer, as near as a GPU gets: the same step in float64. Some gradients are
    # ill-conditioned (a ResNet's BatchNorm parameters: torch's own fp32 and bf16 runs differ
    # from this by more than the tolerance); see torch_noise below.
    loss64, norms64 = step(copy.deepcopy(model).double(), ids, labels, vocab, args.device, bf16=False,
                           dtype=torch.float64)

    rows = []
    ok = True
    print(f"scalebench {exported['backend']} {precision} vs torch {torch.__version__} on {args.device} "
          f"({'bf16 autocast' if ref_norms is norms16 else 'fp32'}); {meta['model']['arch']}, "
          f"{meta['num_params']} parameters, batch {exported['batch']} x {exported['seq_len']}")
    print(f"tolerance: loss {loss_tol:g}, gradient norms {grad_tol:g} (relative)")
    header = (f"{'quantity':64} {'scalebench':>13} {'torch':>13} {'rel.err':>9} {'torch bf16/fp32':>16} "
              f"{'ours vs fp64':>12} {'torch vs fp64':>13}  ok")
    print(header)
    print("-" * len(header))

    # A gradient that is zero in exact arithmetic (the attention key biases: softmax is
    # invariant to a constant added to a row) holds only rounding on both sides, so its
    # relative error means nothing; both under this floor counts as agreement.
    zero_floor = ZERO_GRADIENT_FLOOR * max(norms32.values())

    def row(name, kind, ours, theirs, exact, bf16_vs_fp32, tol, floor=0.0):
        e, ours64, theirs64 = rel(ours, theirs), rel(ours, exact), rel(theirs, exact)
        rows.append({"quantity": name, "kind": kind, "scalebench": ours, "torch": theirs, "rel_err": e,
                     "torch_bf16_vs_fp32": bf16_vs_fp32, "scalebench_vs_fp64": ours64, "torch_vs_fp64": theirs64,
                     "tolerance": tol, "zero_gradient": floor > 0 and abs(ours) <= floor and abs(theirs) <= floor})

    row("loss", "loss", exported["loss"], ref_loss, loss64, rel(loss16, loss32), loss_tol)
    for p in meta["params"]:
        n = p["name"]
        row(f"grad_norm {n}", "vector" if p["rows"] == 1 else "matrix", exported["grad_norms"][n], ref_norms[n],
            norms64[n], rel(norms16[n], norms32[n]), grad_tol, zero_floor)
    # How far torch itself lands from float64 at this precision, per kind of quantity (the loss;
    # vectors: norm gains and biases, where a ResNet's BatchNorm gradients are ill-conditioned;
    # matrices): the rounding noise of this step. Within twice that, scalebench is as exact as torch.
    torch_noise = {}
    for r in rows:
        if not r["zero_gradient"]:
            torch_noise[r["kind"]] = max(torch_noise.get(r["kind"], 0.0), r["torch_vs_fp64"])
    for r in rows:
        as_torch = r["scalebench_vs_fp64"] <= 2 * torch_noise.get(r["kind"], 0.0)
        r["passed"] = math.isfinite(r["scalebench"]) and (r["rel_err"] <= r["tolerance"] or r["zero_gradient"] or as_torch)
        ok = ok and r["passed"]
        verdict = ("zero" if r["zero_gradient"] else "ok" if r["rel_err"] <= r["tolerance"] else "as torch")
        print(f"{r['quantity']:64} {r['scalebench']:13.6g} {r['torch']:13.6g} {r['rel_err']:9.2e} "
              f"{r['torch_bf16_vs_fp32']:16.2e} {r['scalebench_vs_fp64']:12.2e} {r['torch_vs_fp64']:13.2e}  "
              f"{verdict if r['passed'] else 'FAIL'}")
    print(f"('zero': both norms below {ZERO_GRADIENT_FLOOR:g} of the largest, {zero_floor:.3g}: a gradient that is "
          f"zero in exact arithmetic; 'as torch': beyond the tolerance against torch, but within twice torch's own "
          f"largest distance from float64 on this step for its kind: "
          f"{', '.join(f'{k} {v:.2e}' for k, v in torch_noise.items())})")
    worst = max((r for r in rows if not r["zero_gradient"]), key=lambda r: r["rel_err"])
    print(f"{sum(r['passed'] for r in rows)}/{len(rows)} passed; largest error against torch {worst['rel_err']:.2e} "
          f"({worst['quantity']}): {'PASS' if ok else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"export": exported["config"], "backend": exported["backend"], "precision": precision,
                       "torch": torch.__version__, "device": args.device,
                       "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                       "passed": ok, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
