#!/usr/bin/env python3
"""Independent forward of scalebench's exported transformer, in plain Python (no numpy, no torch).

Reads a scalebench_export_step folder, rebuilds each tensor in Hugging Face's layout from
params.json (GPT-2 Conv1D weights transposed back to [in, out]) and computes the loss the way
Hugging Face's BertForMaskedLM / GPT2LMHeadModel define the model: BERT post-LN with exact GELU,
the MLM transform and the decoder tied to the word embeddings plus cls.predictions.bias; GPT-2
pre-LN with causal attention, tanh GELU, ln_f and the LM head tied to wte. Exits 1 when the
loss differs from the exported one by more than --tol (relative). Meant for tiny fp32 configs
(CTest runs it on configs/ci-transformer.yaml and its GPT twin); torch_transformer_check.py is
the full comparison against Hugging Face itself.

  python3 tests/reference/python_transformer_reference.py /tmp/export-dir
"""
import array
import argparse
import json
import math
import os
import sys


def load(folder):
    meta = json.load(open(os.path.join(folder, "params.json")))
    step = json.load(open(os.path.join(folder, "step.json")))
    flat = array.array("f")
    with open(os.path.join(folder, "params.bin"), "rb") as f:
        flat.frombytes(f.read())
    def ints(name):
        a = array.array("i")
        with open(os.path.join(folder, name), "rb") as f:
            a.frombytes(f.read())
        return list(a)
    tensors = {}
    for p in meta["params"]:
        rows, cols = p["rows"], p["cols"]
        data = flat[p["offset"]:p["offset"] + rows * cols]
        m = [list(data[r * cols:(r + 1) * cols]) for r in range(rows)]
        if p["hf_transposed"]:  # HF's Conv1D tensor is [in, out]
            m = [list(col) for col in zip(*m)]
        tensors[p["name"]] = m[0] if rows == 1 else m
    return meta, step, tensors, ints("ids.bin"), ints("labels.bin")


def linear(x, w, b=None):  # nn.Linear: x W^T + b, W [out, in]
    out = [[sum(xi * wi for xi, wi in zip(row, wr)) for wr in w] for row in x]
    if b is not None:
        out = [[v + bj for v, bj in zip(row, b)] for row in out]
    return out


def conv1d(x, w, b):  # HF GPT-2 Conv1D: x W + b, W [in, out]
    return linear(x, [list(c) for c in zip(*w)], b)


def layernorm(x, g, b, eps):
    out = []
    for row in x:
        mu = sum(row) / len(row)
        var = sum((v - mu) ** 2 for v in row) / len(row)
        r = 1.0 / math.sqrt(var + eps)
        out.append([(v - mu) * r * gj + bj for v, gj, bj in zip(row, g, b)])
    return out


def add(a, b):
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def gelu_erf(x):
    return [[0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in row] for row in x]


def gelu_tanh(x):
    c = math.sqrt(2 / math.pi)
    return [[0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v ** 3))) for v in row] for row in x]


def attention(q, k, v, batch, seq, heads, causal):
    width = len(q[0])
    d = width // heads
    out = [[0.0] * width for _ in q]
    for b in range(batch):
        for h in range(heads):
            sl = slice(h * d, (h + 1) * d)
            for i in range(seq):
                qi = q[b * seq + i][sl]
                keys = range(i + 1) if causal else range(seq)
                s = [sum(x * y for x, y in zip(qi, k[b * seq + j][sl])) / math.sqrt(d) for j in keys]
                mx = max(s)
                e = [math.exp(v_ - mx) for v_ in s]
                z = sum(e)
                for jj, j in enumerate(keys):
                    p = e[jj] / z
                    vj = v[b * seq + j][sl]
                    row = out[b * seq + i]
                    for t in range(d):
                        row[h * d + t] += p * vj[t]
    return out


def bert_logits(m, T, ids, batch, seq):
    eps, heads = m["layernorm_eps"], m["heads"]
    e = [[a + b + c for a, b, c in zip(T["bert.embeddings.word_embeddings.weight"][tok],
                                         T["bert.embeddings.position_embeddings.weight"][i % seq],
                                         T["bert.embeddings.token_type_embeddings.weight"][0])]
         for i, tok in enumerate(ids)]
    x = layernorm(e, T["bert.embeddings.LayerNorm.weight"], T["bert.embeddings.LayerNorm.bias"], eps)
    for l in range(m["layers"]):
        p = f"bert.encoder.layer.{l}."
        q = linear(x, T[p + "attention.self.query.weight"], T[p + "attention.self.query.bias"])
        k = linear(x, T[p + "attention.self.key.weight"], T[p + "attention.self.key.bias"])
        v = linear(x, T[p + "attention.self.value.weight"], T[p + "attention.self.value.bias"])
        ctx = attention(q, k, v, batch, seq, heads, causal=False)
        a = linear(ctx, T[p + "attention.output.dense.weight"], T[p + "attention.output.dense.bias"])
        x1 = layernorm(add(a, x), T[p + "attention.output.LayerNorm.weight"], T[p + "attention.output.LayerNorm.bias"], eps)
        i = gelu_erf(linear(x1, T[p + "intermediate.dense.weight"], T[p + "intermediate.dense.bias"]))
        o = linear(i, T[p + "output.dense.weight"], T[p + "output.dense.bias"])
        x = layernorm(add(o, x1), T[p + "output.LayerNorm.weight"], T[p + "output.LayerNorm.bias"], eps)
    t = gelu_erf(linear(x, T["cls.predictions.transform.dense.weight"], T["cls.predictions.transform.dense.bias"]))
    t = layernorm(t, T["cls.predictions.transform.LayerNorm.weight"], T["cls.predictions.transform.LayerNorm.bias"], eps)
    return linear(t, T["bert.embeddings.word_embeddings.weight"], T["cls.predictions.bias"])


def gpt_logits(m, T, ids, batch, seq):
    eps, heads, H = m["layernorm_eps"], m["heads"], m["hidden"]
    x = [[a + b for a, b in zip(T["transformer.wte.weight"][tok], T["transformer.wpe.weight"][i % seq])]
         for i, tok in enumerate(ids)]
    for l in range(m["layers"]):
        p = f"transformer.h.{l}."
        a = layernorm(x, T[p + "ln_1.weight"], T[p + "ln_1.bias"], eps)
        qkv = conv1d(a, T[p + "attn.c_attn.weight"], T[p + "attn.c_attn.bias"])
        q, k, v = ([row[s * H:(s + 1) * H] for row in qkv] for s in range(3))
        ctx = attention(q, k, v, batch, seq, heads, causal=True)
        x = add(x, conv1d(ctx, T[p + "attn.c_proj.weight"], T[p + "attn.c_proj.bias"]))
        mm = layernorm(x, T[p + "ln_2.weight"], T[p + "ln_2.bias"], eps)
        f = gelu_tanh(conv1d(mm, T[p + "mlp.c_fc.weight"], T[p + "mlp.c_fc.bias"]))
        x = add(x, conv1d(f, T[p + "mlp.c_proj.weight"], T[p + "mlp.c_proj.bias"]))
    x = layernorm(x, T["transformer.ln_f.weight"], T["transformer.ln_f.bias"], eps)
    return linear(x, T["transformer.wte.weight"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--tol", type=float, default=2e-6)
    args = ap.parse_args()
    meta, step, T, ids, labels = load(args.folder)
    m = meta["model"]
    if step["precision"] not in ("fp32", "tf32"):
        sys.exit(f"this reference compares fp32 exports; got {step['precision']}")
    batch, seq = step["batch"], step["seq_len"]
    logits = (bert_logits if m["arch"] == "bert" else gpt_logits)(m, T, ids, batch, seq)
    total, n = 0.0, 0
    for row, label in zip(logits, labels):
        if label < 0:
            continue
        mx = max(row)
        total += math.log(sum(math.exp(v - mx) for v in row)) + mx - row[label]
        n += 1
    loss = total / n
    err = abs(step["loss"] - loss) / abs(loss)
    ok = err <= args.tol
    print(f"{m['arch']}: scalebench loss {step['loss']:.7g}, plain-Python HF-semantics loss {loss:.7g} over {n} "
          f"labelled tokens, relative error {err:.2e} (tolerance {args.tol:g}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
