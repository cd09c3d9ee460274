"""PyTorch peer of `cargo xtask bench model` (CPU) and `cargo xtask device-check` (GPU):
training tokens/s of the tiny Qwen3 (or a SmolLM2-shaped Llama), and on a GPU its batched
decoding too.

The model is the same architecture as `crates/envace/src/model/decoder.rs` written plainly in
torch (RMSNorm, per-head q/k RMSNorm for Qwen3 only, grouped-query attention, rotate-half RoPE,
SwiGLU, tied embeddings), with the shapes, data, loss, optimiser and step structure of
`envace::bench::bench_train`: next-token cross-entropy on the same pseudo-random tokens, AdamW
with the same defaults, one warm-up step, then timed steps of forward, backward and update.
Prints one JSON line with its figures.

usage: torch_train.py CONFIG_JSON
CONFIG_JSON holds the model sizes and run shape, as the xtask passes them from our side, and
optionally "device" ("cpu", the default, or "cuda") and "decode_batches" (row counts of a
greedy KV-cached decode of "decode_tokens" new tokens after a 16-token prompt, as
`envace::bench::bench_decode` does).
"""

import json
import math
import sys
import time

import torch
import torch.nn.functional as F


class RmsNorm(torch.nn.Module):
    """RMSNorm over the last dimension with a learned scale (initialised to ones)."""

    def __init__(self, width, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * scale * self.weight


def rotate_half(x):
    """The rotate-half RoPE partner of x: (-x2, x1) along the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(torch.nn.Module):
    """One Qwen3 decoder layer."""

    def __init__(self, cfg):
        super().__init__()
        hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
        self.qk_norm = cfg.get("architecture", "qwen3") == "qwen3"
        self.n_heads, self.n_kv_heads, self.head_dim = cfg["n_heads"], cfg["n_kv_heads"], head_dim
        eps = cfg["rms_norm_eps"]
        linear = lambda n_in, n_out: torch.nn.Linear(n_in, n_out, bias=False)
        self.input_layernorm = RmsNorm(hidden, eps)
        self.q_proj = linear(hidden, self.n_heads * head_dim)
        self.k_proj = linear(hidden, self.n_kv_heads * head_dim)
        self.v_proj = linear(hidden, self.n_kv_heads * head_dim)
        self.o_proj = linear(self.n_heads * head_dim, hidden)
        if self.qk_norm:
            self.q_norm = RmsNorm(head_dim, eps)
            self.k_norm = RmsNorm(head_dim, eps)
        self.post_attention_layernorm = RmsNorm(hidden, eps)
        self.gate_proj = linear(hidden, cfg["intermediate_size"])
        self.up_proj = linear(hidden, cfg["intermediate_size"])
        self.down_proj = linear(cfg["intermediate_size"], hidden)

    def forward(self, x, cos, sin, allowed, cache=None):
        """`allowed` is (1 or b, 1, l, total) with total = cached + l positions; `cache` is a
        list [k, v] extended in place (decoding) or None (training)."""
        b, l, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, l, self.n_heads, self.head_dim)
        k = self.k_proj(h).view(b, l, self.n_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(h).view(b, l, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            if cache:
                k = torch.cat((cache[0], k), dim=2)
                v = torch.cat((cache[1], v), dim=2)
            cache[:] = [k, v]
        total = k.shape[2]
        # Grouped-query attention as ours does it: the query heads sharing a key/value head are
        # stacked along the sequence axis, so keys and values are never copied per head.
        n_rep = self.n_heads // self.n_kv_heads
        q = q.reshape(b, self.n_kv_heads, n_rep * l, self.head_dim)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.view(b, self.n_heads, l, total).masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(b, self.n_kv_heads, n_rep * l, total)
        attn = (probs @ v).view(b, self.n_heads, l, self.head_dim).transpose(1, 2)
        x = x + self.o_proj(attn.reshape(b, l, self.n_heads * self.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Qwen3(torch.nn.Module):
    """Embedding, decoder layers, final norm and a head tied to the embedding."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(cfg) for _ in range(cfg["n_layers"]))
        self.norm = RmsNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        half = cfg["head_dim"] // 2
        inv_freq = 1.0 / cfg["rope_theta"] ** (torch.arange(half, dtype=torch.float32) * 2 / cfg["head_dim"])
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            torch.nn.init.normal_(param, mean=0.0, std=cfg["initializer_range"])

    def forward(self, ids, start=0, caches=None):
        """Logits of `ids` at positions start.. (the first `start` are in `caches`)."""
        b, l = ids.shape
        device = ids.device
        positions = torch.arange(start, start + l, dtype=torch.float32, device=device)
        angles = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        allowed = torch.ones(l, start + l, dtype=torch.bool, device=device).tril(start)[None, None]
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, allowed, None if caches is None else caches[i])
        return self.norm(x) @ self.embed_tokens.weight.t()


def decode(model, batch, prompt_len, n_new, vocab, device):
    """Greedy KV-cached decoding of `batch` rows (the prompts of `bench_decode`), no stop
    token: new tokens per second, fastest of three after a 2-token warm-up."""
    prompts = torch.tensor(
        [[(row * 31 + i * 7 + 1) % vocab for i in range(prompt_len)] for row in range(batch)],
        dtype=torch.long, device=device)

    def run(n):
        caches = [[] for _ in model.layers]
        logits = model(prompts, 0, caches)
        token = logits[:, -1].argmax(-1, keepdim=True)
        out = [token]
        for i in range(1, n):
            logits = model(token, prompt_len + i - 1, caches)
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
        return torch.cat(out, dim=1).cpu()

    best = float("inf")
    with torch.no_grad():
        run(2)
        for _ in range(3):
            sync(device)
            t0 = time.perf_counter()
            run(n_new)
            best = min(best, time.perf_counter() - t0)
    return {"batch": batch, "prompt_len": prompt_len, "n_tokens": batch * n_new, "secs": best,
            "tokens_per_sec": batch * n_new / max(best, 1e-9)}


def sync(device):
    """Waits for a GPU's queued work (its ops run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    cfg = json.loads(sys.argv[1])
    torch.manual_seed(0)
    torch.set_num_threads(cfg["n_threads"])
    device = torch.device(cfg.get("device", "cpu"))
    model = Qwen3(cfg).to(device)
    batch, seq_len, n_steps, vocab = cfg["batch"], cfg["seq_len"], cfg["n_steps"], cfg["vocab_size"]
    # The same tokens as ours: i * 2654435761 mod vocab over (batch, seq_len + 1).
    n = batch * (seq_len + 1)
    tokens = torch.tensor([(i * 2_654_435_761) % vocab for i in range(n)], dtype=torch.long,
                          device=device)
    tokens = tokens.view(batch, seq_len + 1)
    inputs, labels = tokens[:, :seq_len], tokens[:, 1:].reshape(-1)
    # candle's ParamsAdamW defaults, which are also torch's: lr 1e-3, betas (0.9, 0.999),
    # eps 1e-8, weight decay 0.01.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def step():
        t0 = time.perf_counter()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, vocab), labels)
        sync(device)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sync(device)
        t2 = time.perf_counter()
        opt.step()
        sync(device)
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, loss.item()

    step()
    totals, final_loss = [0.0, 0.0, 0.0], float("nan")
    for _ in range(n_steps):
        forward, backward, update, final_loss = step()
        totals[0] += forward
        totals[1] += backward
        totals[2] += update
    secs = sum(totals)
    steps = max(n_steps, 1)
    decodes = [decode(model, b, 16, cfg.get("decode_tokens", 64), vocab, device)
               for b in cfg.get("decode_batches", [])]
    print(json.dumps({
        "peer": f"pytorch {torch.__version__} {device.type}",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "decode": decodes,
        "n_threads": torch.get_num_threads(),
        "n_params": sum(p.numel() for p in model.parameters()),
        "n_steps": n_steps,
        "batch": batch,
        "seq_len": seq_len,
        "forward_secs": totals[0] / steps,
        "backward_secs": totals[1] / steps,
        "update_secs": totals[2] / steps,
        "tokens_per_sec": n_steps * batch * seq_len / max(secs, 1e-9),
        "final_loss": final_loss,
    }))


if __name__ == "__main__":
    main()
