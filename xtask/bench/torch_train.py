"""PyTorch CPU peer of `cargo xtask bench model`: training tokens/s of the tiny Qwen3.

The model is the same architecture as `crates/envace/src/model/qwen3.rs` written plainly in
torch (RMSNorm, per-head q/k RMSNorm, grouped-query attention, rotate-half RoPE, SwiGLU, tied
embeddings), with the shapes, data, loss, optimiser and step structure of
`envace::model::bench::bench_train`: next-token cross-entropy on the same pseudo-random
tokens, AdamW with the same defaults, one warm-up step, then timed steps of forward, backward
and update. Prints one JSON line with its figures.

usage: torch_train.py CONFIG_JSON
CONFIG_JSON holds the model sizes and run shape, as the xtask passes them from our side.
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
        self.n_heads, self.n_kv_heads, self.head_dim = cfg["n_heads"], cfg["n_kv_heads"], head_dim
        eps = cfg["rms_norm_eps"]
        linear = lambda n_in, n_out: torch.nn.Linear(n_in, n_out, bias=False)
        self.input_layernorm = RmsNorm(hidden, eps)
        self.q_proj = linear(hidden, self.n_heads * head_dim)
        self.k_proj = linear(hidden, self.n_kv_heads * head_dim)
        self.v_proj = linear(hidden, self.n_kv_heads * head_dim)
        self.o_proj = linear(self.n_heads * head_dim, hidden)
        self.q_norm = RmsNorm(head_dim, eps)
        self.k_norm = RmsNorm(head_dim, eps)
        self.post_attention_layernorm = RmsNorm(hidden, eps)
        self.gate_proj = linear(hidden, cfg["intermediate_size"])
        self.up_proj = linear(hidden, cfg["intermediate_size"])
        self.down_proj = linear(cfg["intermediate_size"], hidden)

    def forward(self, x, cos, sin, allowed):
        b, l, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(h).view(b, l, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(b, l, self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(h).view(b, l, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention as ours does it: the query heads sharing a key/value head are
        # stacked along the sequence axis, so keys and values are never copied per head.
        n_rep = self.n_heads // self.n_kv_heads
        q = q.reshape(b, self.n_kv_heads, n_rep * l, self.head_dim)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.view(b, self.n_heads, l, l).masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(b, self.n_kv_heads, n_rep * l, l)
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

    def forward(self, ids):
        b, l = ids.shape
        angles = torch.arange(l, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        allowed = torch.ones(l, l, dtype=torch.bool).tril()[None, None]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x) @ self.embed_tokens.weight.t()


def main():
    cfg = json.loads(sys.argv[1])
    torch.manual_seed(0)
    torch.set_num_threads(cfg["n_threads"])
    model = Qwen3(cfg)
    batch, seq_len, n_steps, vocab = cfg["batch"], cfg["seq_len"], cfg["n_steps"], cfg["vocab_size"]
    # The same tokens as ours: i * 2654435761 mod vocab over (batch, seq_len + 1).
    n = batch * (seq_len + 1)
    tokens = torch.tensor([(i * 2_654_435_761) % vocab for i in range(n)], dtype=torch.long)
    tokens = tokens.view(batch, seq_len + 1)
    inputs, labels = tokens[:, :seq_len], tokens[:, 1:].reshape(-1)
    # candle's ParamsAdamW defaults, which are also torch's: lr 1e-3, betas (0.9, 0.999),
    # eps 1e-8, weight decay 0.01.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def step():
        t0 = time.perf_counter()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, vocab), labels)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
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
    print(json.dumps({
        "peer": f"pytorch {torch.__version__} cpu",
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
