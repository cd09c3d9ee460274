"""TRL peer of `cargo xtask bench grpo`: TRL's GRPOTrainer on the CPU doing the GRPO steps our
`envace train` just did, with the same work per step, and one JSON line with its figures.

What is the same as our run (the xtask passes it all in CONFIG_JSON):
- the model: a randomly initialised Qwen3 of our run's `config.json` (same sizes, vocabulary
  and context), f32;
- the tokenizer: our run's `tokenizer.json`, with `<|im_end|>` as the stop token;
- the prompts: the exact prompt token ids our run's act turns were generated from, read from
  its run store, step by step in the same order (TRL's shuffling off), decoded to text and
  checked to encode back to the same ids;
- the step (activations kept for the backward, no recomputation, as ours):
  `batch_size` prompts x `group_size` completions of at most `max_completion_length`
  tokens sampled at the same temperature and top-p, the reward of each completion, then one
  optimizer update over micro-batches of `micro_batch_size` completions (TRL's gradient
  accumulation), clipped-ratio loss with the same epsilon and KL coefficient against a frozen
  reference, AdamW with the same learning rate, betas, epsilon, weight decay and gradient
  clipping;
- the reward: our rule judge's checklist rules on the one assistant turn (the required calls'
  arguments, the facts the final answer must mention), from the tasks `envace config tasks`
  wrote; every task's oracle trajectory must score 1 under it before anything is timed;
- threads: `n_threads` for torch's intra-op pool.

usage: trl_grpo.py CONFIG_JSON
"""

import json
import os
import resource
import sqlite3
import sys
import tempfile
import time


def parse_tool_calls(text):
    """The `<tool_call>{json}</tool_call>` blocks of a turn as (name, arguments) pairs, the
    well-formed ones only, as our engine parses them (arguments may be a JSON string)."""
    calls = []
    pos = 0
    while True:
        start = text.find("<tool_call>", pos)
        if start < 0:
            break
        body_start = start + len("<tool_call>")
        end = text.find("</tool_call>", body_start)
        if end < 0:
            break
        pos = end + len("</tool_call>")
        try:
            value = json.loads(text[body_start:end].strip())
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        name = value.get("name")
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                continue
        if isinstance(name, str) and name.strip() and isinstance(arguments, dict):
            calls.append((name, arguments))
    return calls


def json_eq(a, b):
    """Equality with numbers compared by value (1 equals 1.0), as our judge compares."""
    number = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    if isinstance(a, number) and isinstance(b, number):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and json_eq(v, b[k]) for k, v in a.items())
    return a == b


def final_answer(assistant_turns):
    """The last assistant turn when it calls no tool, `<think>` stripped; else None."""
    if not assistant_turns:
        return None
    last = assistant_turns[-1]
    if "<tool_call>" in last:
        return None
    if "</think>" in last:
        last = last[last.find("</think>") + len("</think>"):]
    return last.strip()


def assign_calls(standards, calls):
    """Pairs each required call of the checklist's argument standards with at most one actual
    call to the same tool, the most equal arguments first (ties: earlier required, then
    earlier actual call)."""
    required = []
    for standard in standards:
        rule = standard["rule"]
        if rule["kind"] == "argument":
            name, arguments = rule["name"], rule["arguments"]
            if not any(n == name and json_eq(a, arguments) for n, a in required):
                required.append((name, arguments))
    pairs = []
    for r, (name, want) in enumerate(required):
        for c, (call_name, call_args) in enumerate(calls):
            if call_name == name:
                matching = sum(1 for k, v in want.items() if k in call_args and json_eq(call_args[k], v))
                pairs.append((-matching, r, c))
    pairs.sort()
    paired = [None] * len(required)
    used = [False] * len(calls)
    for _, r, c in pairs:
        if paired[r] is None and not used[c]:
            paired[r] = calls[c]
            used[c] = True
    return [(name, arguments, call) for (name, arguments), call in zip(required, paired)]


def score(checklists, assistant_turns):
    """Our rule judge's episode score for assistant turns judged once: each checklist's
    weighted fraction of standards met, averaged over checklists."""
    calls = [call for turn in assistant_turns for call in parse_tool_calls(turn)]
    answer = final_answer(assistant_turns)
    total = 0.0
    for checklist in checklists:
        assigned = assign_calls(checklist["standards"], calls)
        met_weight = weight = 0.0
        for standard in checklist["standards"]:
            want = standard["rule"]
            if want["kind"] == "called":
                met = any(n == want["name"] and json_eq(a, want["arguments"]) for n, a in calls)
            elif want["kind"] == "argument":
                call = next(
                    (c for n, a, c in assigned if n == want["name"] and json_eq(a, want["arguments"])),
                    None,
                )
                key = want["key"]
                met = call is not None and key in call[1] and json_eq(call[1][key], want["arguments"].get(key))
            elif want["kind"] == "mentions":
                if answer is None:
                    met = False
                elif want.get("exact_case"):
                    met = want["text"] in answer
                else:
                    met = want["text"].lower() in answer.lower()
            else:
                # A state standard needs the environment's state after the trajectory, which a
                # single generated turn never changes on the stateless domains benchmarked here.
                raise SystemExit(f"trl_grpo.py: a {want['kind']} rule is not supported by this benchmark")
            weight += standard["weight"]
            met_weight += standard["weight"] if met else 0.0
        total += met_weight / weight if weight > 0 else 0.0
    return total / len(checklists) if checklists else 0.0


def main():
    cfg = json.loads(sys.argv[1])
    for key in ("n_threads", "seed", "n_steps", "batch_size", "group_size", "micro_batch_size", "max_completion_length", "run_id"):
        cfg[key] = int(cfg[key])
    n_threads = cfg["n_threads"]
    os.environ.setdefault("OMP_NUM_THREADS", str(n_threads))
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(n_threads)
    torch.manual_seed(cfg["seed"])

    tasks = {}
    with open(cfg["tasks"]) as f:
        for line in f:
            task = json.loads(line)
            tasks[task["id"]] = task
    # The rule implementation is checked before anything is timed: every oracle passes.
    for task in tasks.values():
        turns = [m["content"] for m in task["oracle"] if m["role"] == "assistant"]
        got = score(task["checklists"], turns)
        if abs(got - 1.0) > 1e-9:
            raise SystemExit(f"trl_grpo.py: the oracle of {task['id']} scores {got} under the Python rules, not 1")

    # The prompts our run generated from, step by step, and our rewards for the check below.
    store = sqlite3.connect(f"file:{cfg['store']}?mode=ro", uri=True)
    rows = store.execute(
        "SELECT step, task_id, reward, data FROM trajectories WHERE run_id = ? ORDER BY step, episode_idx",
        (cfg["run_id"],),
    ).fetchall()
    by_step = {}
    ours_checked = ours_agree = 0
    for step, task_id, reward, data in rows:
        record = json.loads(data)
        act = next(s for s in record["samples"] if s["role"] == "act")
        n_prompt = len(act["labels"]) - len(act["labels"].lstrip("P"))
        prompt_ids = act["tokens"][:n_prompt]
        prompts = by_step.setdefault(step, [])
        if task_id not in [t for t, _ in prompts]:
            prompts.append((task_id, prompt_ids))
        if reward is not None and task_id in tasks:
            turns = [t["text"] for t in record["turns"]]
            ours_checked += 1
            ours_agree += abs(score(tasks[task_id]["checklists"], turns) - reward) < 1e-9
    steps = sorted(by_step)
    if len(steps) < cfg["n_steps"]:
        raise SystemExit(f"trl_grpo.py: the store holds {len(steps)} steps of run {cfg['run_id']}, expected {cfg['n_steps']}")

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=cfg["tokenizer"])
    tokenizer.eos_token = cfg["stop_token"]
    tokenizer.pad_token = cfg["stop_token"]
    prompt_texts, task_ids = [], []
    for step in steps[: cfg["n_steps"]]:
        for task_id, ids in by_step[step]:
            text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            again = tokenizer(text, add_special_tokens=False)["input_ids"]
            if again != ids:
                raise SystemExit(f"trl_grpo.py: the prompt of {task_id} does not encode back to our token ids")
            prompt_texts.append(text)
            task_ids.append(task_id)
    per_step = len(prompt_texts) // cfg["n_steps"]
    if per_step != cfg["batch_size"]:
        raise SystemExit(f"trl_grpo.py: {per_step} prompts per step in the store, expected {cfg['batch_size']}")

    model_config = AutoConfig.from_pretrained(cfg["model_config_dir"])
    model_config.eos_token_id = tokenizer.convert_tokens_to_ids(cfg["stop_token"])
    model_config.pad_token_id = model_config.eos_token_id
    model = AutoModelForCausalLM.from_config(model_config).float()
    work = tempfile.mkdtemp(prefix="trl-grpo-")
    # TRL builds its frozen reference from a model path when beta > 0.
    model.save_pretrained(os.path.join(work, "model"))
    tokenizer.save_pretrained(os.path.join(work, "model"))

    def reward(completions, task_id, **_):
        return [score(tasks[t]["checklists"], [c]) for c, t in zip(completions, task_id)]

    dataset = Dataset.from_dict({"prompt": prompt_texts, "task_id": task_ids})
    micro = cfg["micro_batch_size"]
    n_completions = cfg["batch_size"] * cfg["group_size"]
    args = GRPOConfig(
        output_dir=os.path.join(work, "out"),
        use_cpu=True,
        # TRL turns activation checkpointing on by default (the forward recomputed in the
        # backward); ours keeps activations, so TRL must too for the same work.
        activation_checkpointing=False,
        bf16=False,
        fp16=False,
        seed=cfg["seed"],
        max_steps=cfg["n_steps"],
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=n_completions // micro,
        steps_per_generation=n_completions // micro,
        num_generations=cfg["group_size"],
        max_completion_length=cfg["max_completion_length"],
        temperature=cfg["temperature"],
        top_p=cfg["top_p"],
        top_k=0,
        shuffle_dataset=False,
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        weight_decay=cfg["weight_decay"],
        max_grad_norm=cfg["grad_clip"],
        beta=cfg["kl_coef"],
        epsilon=cfg["clip_ratio"],
        scale_rewards="none",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=os.path.join(work, "model"),
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    # Per optimizer step: wall time (from one step's end to the next), time in generation and
    # the tokens generated.
    generation = {"secs": 0.0, "tokens": 0}
    original = trainer._generate_single_turn

    def timed_generate(*a, **kw):
        started = time.perf_counter()
        completion_ids, logprobs = original(*a, **kw)
        generation["secs"] += time.perf_counter() - started
        generation["tokens"] += sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generate
    steps_out = []

    class Timer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_step_end(self, *_, **__):
            now = time.perf_counter()
            secs = now - self.last
            steps_out.append(
                {
                    "step_secs": secs,
                    "rollout_secs": generation["secs"],
                    "update_secs": secs - generation["secs"],
                    "generated_tokens": generation["tokens"],
                }
            )
            generation["secs"], generation["tokens"] = 0.0, 0
            self.last = now

    trainer.add_callback(Timer())
    trainer.train()
    log = [row for row in trainer.state.log_history if "reward" in row]
    # ru_maxrss is in KiB on Linux.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(
        json.dumps(
            {
                "steps": steps_out,
                "rewards": [row["reward"] for row in log],
                "optimizer_updates": trainer.state.global_step,
                "activation_checkpointing": bool(trainer.args.activation_checkpointing),
                "peak_rss_mib": peak,
                "n_prompts": len(prompt_texts),
                "our_rewards_checked": ours_checked,
                "our_rewards_agreeing": ours_agree,
                "versions": {
                    "trl": trl.__version__,
                    "transformers": transformers.__version__,
                    "torch": torch.__version__,
                },
                "n_threads": n_threads,
            }
        )
    )


if __name__ == "__main__":
    main()
