// Pure: the evaluation form's benchmark choices and the request its values make (the studio's
// `start_eval` command runs `envace eval` with it).

import type { EvalRequest } from "./bindings";

/** What can be ticked, as `envace eval --bench` names it. */
export const BENCH_CHOICES: { group: string; items: string[] }[] = [
  {
    group: "BFCL",
    items: ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance", "multi_turn_base"].map(
      (c) => `bfcl:${c}`,
    ),
  },
  { group: "τ²-bench", items: ["tau2:retail", "tau2:airline"] },
  { group: "VitaBench", items: ["vita:delivery"] },
];

/** The request of the form's values (pure, for tests and the form alike). */
export function evalRequest(form: {
  source: "checkpoint" | "model";
  run: number | null;
  step: number | null;
  model: string;
  recordAs: string;
  benches: string[];
  /** Tool-call dataset names, comma- or space-separated (`tools:NAME` each). */
  tools?: string;
  data: string;
  limit: string;
  user: string;
  judge: string;
  rehearsal: string;
  trials: string;
  /** τ²-bench's task split: base (every task), train or test. */
  split?: string;
}): EvalRequest {
  const text = (v: string) => (v.trim() === "" ? null : v.trim());
  const count = (v: string) => (/^\d+$/.test(v.trim()) && Number(v) > 0 ? Number(v) : null);
  const tools = (form.tools ?? "")
    .split(/[\s,]+/)
    .filter((name) => name !== "")
    .map((name) => `tools:${name}`);
  const benches = [...form.benches, ...tools];
  const conversations = benches.some((b) => b.startsWith("tau2:") || b.startsWith("vita:"));
  return {
    run: form.source === "checkpoint" ? form.run : null,
    step: form.source === "checkpoint" ? form.step : null,
    model: form.source === "model" ? text(form.model) : null,
    record_as: form.source === "model" ? text(form.recordAs) : null,
    benches,
    data: form.data.trim(),
    limit: count(form.limit),
    user_endpoint: conversations ? text(form.user) : null,
    judge_endpoint: conversations ? text(form.judge) : null,
    rehearsal: conversations && form.rehearsal !== "off" ? form.rehearsal : null,
    trials: conversations ? count(form.trials) : null,
    split: benches.some((b) => b.startsWith("tau2:")) && form.split && form.split !== "base" ? form.split : null,
  };
}
