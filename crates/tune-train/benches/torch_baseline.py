"""PyTorch eager baseline for `tune bench trainer`: trains the same models on the same data
with the same batch, optimizer and precision as tune's trainer, and prints one JSON line per
configuration: {"model", "amp", "samples_per_s", "steps", "batch"}.

Run by the benchmark itself (crates/tune-train/src/bench.rs), with the repository's .libtorch
tree as the `torch` package (same torch 2.13.0 as tch links):
  PYTHONPATH=.libtorch:.venv/bench python3 crates/tune-train/benches/torch_baseline.py --data DIR ...
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The repository root: this file is crates/tune-train/benches/torch_baseline.py.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data):
    if data == "digits":
        rows = np.loadtxt(
            gzip.open(os.path.join(REPO, "datasets", "digits.csv.gz")),
            delimiter=",",
        )
        x = torch.tensor(rows[:, :64], dtype=torch.float32).view(-1, 1, 8, 8)
        y = torch.tensor(rows[:, 64], dtype=torch.int64)
    else:
        x = torch.tensor(idx(os.path.join(data, "train-images-idx3-ubyte.gz")).copy()).float() / 255.0
        x = x.unsqueeze(1)
        y = torch.tensor(idx(os.path.join(data, "train-labels-idx1-ubyte.gz")).copy()).long()
    x = (x - x.mean()) / x.std()
    return x.contiguous(), y


def mlp(shape, width, depth, classes):
    layers = [nn.Flatten()]
    n_in = int(np.prod(shape))
    for _ in range(depth):
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, classes))
    return nn.Sequential(*layers)


def cnn(shape, width, depth, classes):
    c, h, w = shape
    layers = []
    for i in range(depth):
        out = width << min(i, 4)
        layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU()]
        if h >= 2 and w >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        c = out
    layers += [nn.Flatten(), nn.Linear(c * h * w, classes)]
    return nn.Sequential(*layers)


class Block(nn.Module):
    """tune's ResNet basic block (crates/tune-train/src/models.rs): two 3x3 convs with batch
    norm, a 1x1 projection where the shape changes."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c_out)
        self.c2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c_out)
        self.proj = None
        if stride != 1 or c_in != c_out:
            self.proj = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        skip = x if self.proj is None else self.proj(x)
        return F.relu(y + skip)


def resnet(shape, width, depth, classes):
    """tune's CIFAR-style ResNet: a 3x3 stem, three stages of `depth` blocks (width, 2·width,
    4·width; stride 2 into stages 2 and 3), global average pooling, a linear classifier."""
    c = shape[0]
    layers = [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    c_in = width
    for stage in range(3):
        c_out = width << stage
        for i in range(depth):
            layers.append(Block(c_in, c_out, 2 if stage > 0 and i == 0 else 1))
            c_in = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


class Layer(nn.Module):
    """tune's pre-norm Transformer layer: causal multi-head self-attention through
    scaled_dot_product_attention, then a 4x GELU MLP, each added to the residual."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, y):
        b, t, d = y.shape
        qkv = self.qkv(self.ln1(y)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        y = y + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return y + self.fc2(F.gelu(self.fc1(self.ln2(y))))


class Transformer(nn.Module):
    """tune's byte-level GPT-style model: token and learned position embeddings, the layers,
    a final layer norm and a linear head; (B, T) ids in, (B, T, vocab) logits out."""

    def __init__(self, vocab, d, depth, heads, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        y = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device)).unsqueeze(0)
        for layer in self.layers:
            y = layer(y)
        return self.head(self.ln(y))


def tokens(path, validation=0.01):
    """The training bytes of a text, split as tune's loader splits them (the last
    `validation` share held out)."""
    data = open(path, "rb").read()
    n_train = len(data) - round(len(data) * validation)
    return torch.tensor(list(data[:n_train]), dtype=torch.int64)


def bench_lm(text, amp, width, depth, heads, context, batch, warmup, steps, lr, device="cpu"):
    """As `bench`, for the Transformer: windows of `context` bytes at random multiples of
    `context`, as tune's loader draws them, next-byte cross-entropy on f32 logits."""
    torch.manual_seed(0)
    dev = torch.device(device)
    model = Transformer(256, width, depth, heads, context).to(dev)
    text = text.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler(dev.type, enabled=(amp == "fp16"))
    n = max(text.shape[0] - context - 1, 0) // context
    if n < batch:
        raise SystemExit(f"the text has {n} windows of {context}, fewer than a batch of {batch}")
    offsets = torch.arange(context + 1, device=dev)
    perm = torch.randperm(n, device=dev)
    pos = 0

    def step():
        nonlocal perm, pos
        if pos + batch > n:
            perm = torch.randperm(n, device=dev)
            pos = 0
        starts = perm[pos : pos + batch] * context
        pos += batch
        w = text.index_select(0, (starts.unsqueeze(1) + offsets.unsqueeze(0)).view(-1)).view(-1, context + 1)
        xb, yb = w[:, :context], w[:, 1:]
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            logits = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, 256).float(), yb.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    return timed(step, warmup, steps, batch, dev)


def timed(step, warmup, steps, batch, dev):
    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        step()
    sync()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        loss = step()
    loss.item()
    sync()
    secs, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return steps * batch / secs, steps * batch / cpu


def bench(x, y, model_kind, amp, width, depth, batch, warmup, steps, lr, channels_last=False, device="cpu"):
    torch.manual_seed(0)
    dev = torch.device(device)
    build = {"mlp": mlp, "cnn": cnn, "resnet": resnet}[model_kind]
    model = build(tuple(x.shape[1:]), width, depth, 10).to(dev)
    # The data sits on the device, as tune's does when it fits.
    x, y = x.to(dev), y.to(dev)
    if channels_last and model_kind != "mlp":
        # What tune's trainer does for convolutional models, and eager's fastest layout there.
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    # foreach: one fused kernel per step over all parameters, eager's fastest Adam (the
    # default on CUDA already; explicit so that both devices run the same).
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    # fp16 with dynamic loss scaling, as tune's GradScaler.
    scaler = torch.amp.GradScaler(dev.type, enabled=(amp == "fp16"))
    n = x.shape[0]
    perm = torch.randperm(n, device=dev)
    pos = 0

    def step():
        nonlocal perm, pos
        if pos + batch > n:
            perm = torch.randperm(n, device=dev)
            pos = 0
        i = perm[pos : pos + batch]
        pos += batch
        xb, yb = x.index_select(0, i), y.index_select(0, i)
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            logits = model(xb)
        loss = F.cross_entropy(logits.float(), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    # Samples per wall second, and per second of this thread's CPU time (all compute runs on
    # it with one intra-op thread): the second is what other load on the machine disturbs least.
    return timed(step, warmup, steps, batch, dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--configs", default="", help="model:amp,model:amp,... (empty: read one per line on stdin)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--cnn-width", type=int, default=32)
    ap.add_argument("--resnet-width", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N")
    ap.add_argument("--text", default=os.path.join(REPO, "datasets", "gpl-3.0.txt"))
    ap.add_argument("--tf-width", type=int, default=128)
    ap.add_argument("--tf-heads", type=int, default=4)
    ap.add_argument("--tf-context", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(1)
    x, y = load(a.data)
    text = tokens(a.text)
    # With no --configs, serve requests line by line, one timed run each: the Rust side then
    # alternates its own runs with these, so load from other processes hits both alike.
    serving = not a.configs
    if serving:
        print(json.dumps({"ready": True}), flush=True)
    requests = (line.strip() for line in __import__("sys").stdin) if serving else a.configs.split(",")
    for cfg in requests:
        if not cfg:
            continue
        model_kind, amp = cfg.split(":")
        if model_kind == "transformer":
            runs = [
                bench_lm(text, amp, a.tf_width, a.depth, a.tf_heads, a.tf_context, a.batch, a.warmup, a.steps, a.lr, a.device)
                for _ in range(1 if serving else a.repeat)
            ]
        else:
            width = {"mlp": a.width, "cnn": a.cnn_width, "resnet": a.resnet_width}[model_kind]
            runs = [
                bench(x, y, model_kind, amp, width, a.depth, a.batch, a.warmup, a.steps, a.lr, a.channels_last, a.device)
                for _ in range(1 if serving else a.repeat)
            ]
        best = max(r[0] for r in runs)
        best_cpu = max(r[1] for r in runs)
        print(
            json.dumps(
                {
                    "model": model_kind,
                    "amp": amp,
                    "samples_per_s": best,
                    "samples_per_cpu_s": best_cpu,
                    "steps": a.steps,
                    "batch": a.batch,
                    "torch": torch.__version__,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
