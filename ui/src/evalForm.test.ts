// Unit tests of the evaluation form's request.
import { describe, expect, it } from "vitest";
import { BENCH_CHOICES, evalRequest } from "./evalForm";

const form = {
  source: "checkpoint" as const,
  run: 3,
  step: 8,
  model: "/m.gguf",
  recordAs: "",
  benches: ["bfcl:simple_python"],
  data: " /data ",
  limit: "20",
  user: "self",
  judge: "",
  rehearsal: "parallel:2",
  trials: "2",
};

describe("evaluation request", () => {
  it("sends a checkpoint without the model, and no conversation options for BFCL alone", () => {
    expect(evalRequest(form)).toEqual({
      run: 3, step: 8, model: null, record_as: null, benches: ["bfcl:simple_python"], data: "/data", limit: 20,
      user_endpoint: null, judge_endpoint: null, rehearsal: null, trials: null, split: null,
    });
  });
  it("sends a model file and the conversation options when a conversation benchmark is ticked", () => {
    const request = evalRequest({ ...form, source: "model", benches: ["vita:delivery"], limit: "0", recordAs: " smol " });
    expect(request).toMatchObject({ run: null, step: null, model: "/m.gguf", record_as: "smol", limit: null, user_endpoint: "self", judge_endpoint: null, rehearsal: "parallel:2", trials: 2 });
    expect(evalRequest({ ...form, benches: ["tau2:airline"], rehearsal: "off" }).rehearsal).toBeNull();
  });
  it("sends τ²-bench's split only when a τ² domain is ticked and it is not every task", () => {
    expect(evalRequest({ ...form, benches: ["tau2:retail"], split: "test" }).split).toBe("test");
    expect(evalRequest({ ...form, benches: ["tau2:retail"], split: "base" }).split).toBeNull();
    expect(evalRequest({ ...form, benches: ["vita:delivery"], split: "test" }).split).toBeNull();
  });
  it("adds tool-call datasets by name", () => {
    expect(evalRequest({ ...form, tools: " finance, finmcp  " }).benches).toEqual(["bfcl:simple_python", "tools:finance", "tools:finmcp"]);
  });
  it("offers every benchmark envace eval runs from the studio", () => {
    expect(BENCH_CHOICES.flatMap((g) => g.items)).toContain("vita:delivery");
    expect(BENCH_CHOICES[0].items).toContain("bfcl:irrelevance");
    expect(BENCH_CHOICES[0].items).toContain("bfcl:multi_turn_base");
  });
});
