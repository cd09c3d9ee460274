// Unit tests of the public-benchmark table and the task-record reading of the drill-down.
import { describe, expect, it } from "vitest";
import type { EvalSeries } from "./bindings";
import { compareTable, percent, rehearsalOf, scoreTable, tableCurves, taskDetail } from "./benchTable";

const series = (benchmark: string, metric: string, steps: number[], values: (number | null)[], category = "all"): EvalSeries => ({
  benchmark, category, metric, steps, values, n_tasks: steps.map(() => 50),
});

describe("score table", () => {
  it("has a column per BFCL category and τ² domain, and the family and overall means", () => {
    const table = scoreTable([
      series("bfcl_simple_python", "accuracy", [4, 8], [0.5, 0.7]),
      series("bfcl_simple_python", "accuracy_se", [4, 8], [0.07, 0.06]),
      series("bfcl_multiple", "accuracy", [8], [0.3]),
      series("tau2_airline", "pass^1", [8], [0.2]),
      series("tau2_airline", "avg_reward", [8], [0.25]),
      series("vita_delivery", "pass@1", [8], [0.1]),
      series("vita_delivery", "avg@1", [8], [0.1]),
      series("tools_finance", "f1_macro", [8], [0.9]),
      series("tau2_airline@parallel:4", "pass^1", [8], [0.6]),
      series("tools_finance", "f1_macro", [8], [0.5], "scenario:stock"),
      series("generated_test", "score", [2, 4, 8], [0.1, 0.2, 0.3]),
      series("bfcl_parallel", "accuracy", [4], [0.9], "python"),
    ]);
    expect(table.steps).toEqual([4, 8]);
    expect(table.columns.map((c) => `${c.family}/${c.label}`)).toEqual(["BFCL/multiple", "BFCL/simple_python", "τ²-bench/airline", "τ²-bench/airline@parallel:4", "VitaBench/delivery", "Tool calls/finance"]);
    expect(table.columns[0].values).toEqual([null, 0.3]);
    expect(table.familyMeans).toEqual([
      { family: "BFCL", values: [0.5, 0.5] },
      { family: "τ²-bench", values: [null, 0.2] },
      { family: "VitaBench", values: [null, 0.1] },
      { family: "Tool calls", values: [null, 0.9] },
    ]);
    expect(rehearsalOf("airline@parallel:4")).toBe("parallel:4");
    expect(rehearsalOf("airline")).toBeNull();
    expect(table.overall[0]).toBeCloseTo(0.5);
    expect(table.overall[1]).toBeCloseTo((0.5 + 0.2 + 0.1) / 3);
  });
  it("draws each column, family mean and the overall over checkpoints", () => {
    const table = scoreTable([series("bfcl_multiple", "accuracy", [4, 8], [0.25, 0.5]), series("tau2_retail", "pass^1", [8], [0.1])]);
    const curves = tableCurves(table);
    expect(curves.map((c) => c.key)).toEqual(["BFCL/multiple", "τ²-bench/retail", "BFCL mean", "τ²-bench mean", "overall"]);
    expect(curves[1]).toEqual({ key: "τ²-bench/retail", steps: [4, 8], values: [null, 0.1] });
    expect(curves[4].values[1]).toBeCloseTo(0.3);
  });
  it("compares runs at their latest evaluated checkpoints", () => {
    const compared = compareTable([
      { label: "run 1", series: [series("bfcl_multiple", "accuracy", [4, 8], [0.25, 0.5]), series("vita_delivery", "pass@1", [8], [0.2])] },
      { label: "run 2", series: [series("bfcl_multiple", "accuracy", [2], [0.75]), series("tau2_retail", "pass^1", [2], [0.4])] },
      { label: "run 3", series: [] },
    ]);
    expect(compared.columns.map((c) => c.benchmark)).toEqual(["bfcl_multiple", "tau2_retail", "vita_delivery"]);
    expect(compared.families).toEqual(["BFCL", "τ²-bench", "VitaBench"]);
    expect(compared.rows[0]).toMatchObject({ label: "run 1", step: 8, values: [0.5, null, 0.2], familyMeans: [0.5, null, 0.2] });
    expect(compared.rows[0].overall).toBeCloseTo(0.35);
    expect(compared.rows[1]).toMatchObject({ step: 2, values: [0.75, 0.4, null] });
    expect(compared.rows[2]).toEqual({ label: "run 3", step: null, values: [null, null, null], familyMeans: [null, null, null], overall: null });
  });
  it("is empty without public benchmarks", () => {
    const table = scoreTable([series("generated_test", "score", [2], [0.1])]);
    expect(table.steps).toEqual([]);
    expect(table.columns).toEqual([]);
    expect(percent(null)).toBe("–");
    expect(percent(0.4567)).toBe("45.7%");
  });
});

describe("task detail", () => {
  it("shows a BFCL record's prompt, calls and expected calls", () => {
    const detail = taskDetail(JSON.stringify({
      messages: [{ role: "user", content: "Area of a circle of radius 2?" }],
      result: [{ "math.area": { r: 3 } }],
      expected: [{ "math.area": { r: [2, 2.0] } }],
      reason: "value_error:others: wrong",
    }));
    expect(detail.messages).toEqual([{ role: "user", content: "Area of a circle of radius 2?" }]);
    expect(JSON.parse(detail.output!)).toEqual([{ "math.area": { r: 3 } }]);
    expect(JSON.parse(detail.expected!)).toEqual([{ "math.area": { r: [2, 2.0] } }]);
    expect(taskDetail(JSON.stringify({ messages: [], result: "No tool fits.", expected: null })).expected).toBe("no call (irrelevance)");
  });
  it("shows a BFCL multi-turn record's calls per turn and what each turn's calls were answered", () => {
    const detail = taskDetail(JSON.stringify({
      messages: [{ role: "user", content: "Go to docs." }],
      result: [[[{ cd: { folder: "docs" } }], "Done."]],
      execution: [[['{"current_working_directory": "docs"}']]],
      expected: [["cd(folder='docs')"]],
      reason: "",
    }));
    expect(JSON.parse(detail.output!)).toEqual([[[{ cd: { folder: "docs" } }], "Done."]]);
    expect(JSON.parse(detail.expected!)).toEqual([["cd(folder='docs')"]]);
    expect(detail.facts).toContainEqual(["turn 1 results", '{"current_working_directory": "docs"}']);
  });
  it("shows a τ² conversation with how it ended and the reward's components", () => {
    const detail = taskDetail(JSON.stringify({
      messages: [{ role: "assistant", content: "Hi!" }, { role: "user", content: "###STOP###" }],
      termination: { kind: "user_stop" },
      report: { db: { matched: false }, actions: [{ name: "cancel_reservation", matched: false }], communicate: [{ info: "1628", met: true }] },
      nl_assertions: [],
      masked: null,
    }));
    expect(detail.output).toBeNull();
    expect(detail.expected).toBeNull();
    expect(detail.facts).toEqual([
      ["ended", "user_stop"],
      ["database", "differs from the gold actions' result"],
      ["gold actions", "✗ cancel_reservation"],
      ["told the user", "✓ 1628"],
    ]);
    expect(taskDetail("{not json").facts).toEqual([["record", "not JSON"]]);
  });
  it("shows a VitaBench conversation with each rubric's verdict and calls to tools not rebuilt", () => {
    const detail = taskDetail(JSON.stringify({
      messages: [{ role: "assistant", content: "Hello, how can I help you?" }],
      termination: { kind: "agent_stop" },
      rubrics: [
        { rubric: "The store offers dine-in", met: true, justification: "[4] chose it" },
        { rubric: "Delivered by 12:00", met: false, justification: "" },
      ],
      unbuilt_calls: 1,
      private_notes: ["Private rehearsal (imagined attempts; nothing was executed):\nAttempt 1: answer: \"ok\""],
      imagined_attempts: [[{ calls: [{ name: "get_store", arguments: "{}", response: "store 7" }], outcome: 'answer: "ok"', answered: true }]],
      masked: null,
    }));
    expect(detail.messages).toHaveLength(1);
    expect(detail.facts).toEqual([
      ["ended", "agent_stop"],
      ["rubric", "✓ The store offers dine-in ([4] chose it)"],
      ["rubric", "✗ Delivered by 12:00"],
      ["tools not rebuilt", '1 call(s) answered "not rebuilt"'],
      ["rehearsal memory 1", 'Private rehearsal (imagined attempts; nothing was executed):\nAttempt 1: answer: "ok"'],
      ["rehearsal 1, attempt 1", 'get_store {} → store 7 ; answer: "ok"'],
    ]);
  });
});
