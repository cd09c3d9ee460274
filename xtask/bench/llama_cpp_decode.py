"""llama.cpp peer of `cargo xtask bench model`: greedy decode tokens/s of a GGUF model.

Mirrors `envace::model::bench::bench_quantized_decode`: the same GGUF file, the same prompt
token ids (no BOS added), a two-token warm-up, then timed runs of prompt evaluation plus
`n_new` greedily decoded tokens (argmax of the last logits, no stop token), the fastest of
three. Prints one JSON line with its figures and the decoded ids.

usage: llama_cpp_decode.py CONFIG_JSON
CONFIG_JSON holds `gguf`, `prompt` (token ids), `n_new` and `n_threads`.
"""

import json
import sys
import time

import llama_cpp
import numpy as np


def last_logits(llm):
    """The logits of the last evaluated token (llama.cpp keeps only those when `logits_all`
    is off), read in place."""
    pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),))


def greedy(llm, prompt, n_new):
    """Greedy decoding of `n_new` tokens after `prompt`, from an empty context."""
    llm.reset()
    llm.eval(prompt)
    out = []
    while True:
        token = int(np.argmax(last_logits(llm)))
        out.append(token)
        if len(out) == n_new:
            return out
        llm.eval([token])


def main():
    cfg = json.loads(sys.argv[1])
    prompt, n_new, n_threads = cfg["prompt"], cfg["n_new"], cfg["n_threads"]
    llm = llama_cpp.Llama(
        model_path=cfg["gguf"],
        n_ctx=max(512, len(prompt) + n_new + 8),
        n_batch=512,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        logits_all=False,
        verbose=False,
    )
    greedy(llm, prompt, 2)
    # The fastest of three timed runs counts, as on our side (DECODE_REPEATS); a run so slow
    # that three would take minutes (threads spinning against a busy machine) is not repeated.
    secs, tokens = float("inf"), []
    for _ in range(3):
        if secs < float("inf") and secs > 10.0:
            break
        start = time.perf_counter()
        run_tokens = greedy(llm, prompt, n_new)
        run_secs = time.perf_counter() - start
        if run_secs < secs:
            secs, tokens = run_secs, run_tokens
    print(json.dumps({
        "peer": f"llama-cpp-python {llama_cpp.__version__}",
        "n_threads": n_threads,
        "prompt_len": len(prompt),
        "n_tokens": len(tokens),
        "secs": secs,
        "tokens_per_sec": len(tokens) / max(secs, 1e-9),
        "tokens": tokens,
    }))


if __name__ == "__main__":
    main()
