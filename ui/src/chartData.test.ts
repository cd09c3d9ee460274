// Unit tests of the chart data transforms: chart key matching, the live series store, EMA,
// alignment and min/max decimation (including a million-point series).
import { describe, expect, it } from "vitest";
import {
  CHARTS, DRIFT_KEYS, DRIFT_RULE, SeriesStore, categoryOf, isBudgetCategory, isFamilyCategory, metricOf, patternRegex, TIME_INCRS, align, onAxis, benchmarks, curveSteps, decimate, driftAlarm, ema, evalCurve, flatRange, formatDuration, formatValue, heatColor, heatGrid, keysFor, lastValue,
  latestBars, budgetCurves, meanBand, passAtK, seedArms, type Aligned,
} from "./chartData";

const chart = (id: string) => CHARTS.find((c) => c.id === id)!;

describe("charts", () => {
  const keys = [
    "act/reward", "rehearse/reward", "rl/reward", "rl/success", "act/kl", "rehearse/kl",
    "sft/loss", "sft/loss_act", "sft/grad_norm", "fidelity/key_f1", "fidelity/n_pairs",
    "fidelity/get_weather/value_accuracy", "fidelity/get_weather/key_f1",
    "eval/generated_test/success", "eval/generated_test/score", "perf/tokens_per_sec",
  ];
  it("picks each chart's keys", () => {
    expect(keysFor(chart("reward"), keys)).toEqual(["act/reward", "rehearse/reward", "rl/reward"]);
    expect(keysFor(chart("kl"), keys)).toEqual(["act/kl", "rehearse/kl"]);
    expect(keysFor(chart("sft-loss"), keys)).toEqual(["sft/loss", "sft/loss_act"]);
    expect(keysFor(chart("fidelity"), keys)).toEqual(["fidelity/key_f1"]);
    expect(keysFor(chart("fidelity-tool"), keys)).toEqual(["fidelity/get_weather/value_accuracy"]);
    // Evaluations are drawn by the benchmark panel, from the store's eval_results.
    expect(CHARTS.some((c) => c.matches("eval/generated_test/score"))).toBe(false);
  });
});

describe("the engine's catalogue", () => {
  it("matches keys with the engine's rules", () => {
    expect(metricOf("rehearse/kl")?.key).toBe("{role}/kl");
    expect(metricOf("sft/loss_act")?.key).toBe("sft/loss_{role}");
    expect(metricOf("sft/loss_rl")).toBeNull();
    expect(metricOf("rl/kl")).toBeNull();
    expect(metricOf("fidelity/get_weather/key_f1")?.key).toBe("fidelity/{tool}/{score}");
    expect(metricOf("fidelity/get_weather/nonsense")).toBeNull();
    expect(metricOf("eval//score")).toBeNull();
    expect(metricOf("perf/tokens_per_sec")?.unit).toBe("tokens/s");
    expect(patternRegex("a.b/{x}").test("aXb/y")).toBe(false);
  });
  it("gives every chart a key and knows every key the studio reads by name", () => {
    for (const c of CHARTS) expect(CHARTS.filter((d) => d.id === c.id)).toHaveLength(1);
    for (const key of Object.values(DRIFT_KEYS)) expect(metricOf(key), key).not.toBeNull();
    expect(metricOf("rl/reward")?.chart).toBe("reward");
  });
  it("reads evaluation categories from it", () => {
    expect(categoryOf("all")?.pattern).toBe("all");
    expect(isFamilyCategory("family/fn_arithmetic")).toBe(true);
    expect(isFamilyCategory("all")).toBe(false);
    expect(isBudgetCategory("rehearsal/parallel/4")).toBe(true);
    expect(isBudgetCategory("rehearsal/sequential/0")).toBe(true);
    expect(isBudgetCategory("rehearsal/diagonal/4")).toBe(false);
    expect(isBudgetCategory("rehearsal/parallel/x")).toBe(false);
  });
});

describe("SeriesStore", () => {
  it("grows from step events and replaces a repeated step", () => {
    const store = new SeriesStore();
    store.addStep(1, { "sft/loss": 3, "perf/x": null }, 1000);
    store.addStep(2, { "sft/loss": 2 }, 1001);
    store.addStep(2, { "sft/loss": 2.5 }, 1002);
    store.addStep(4, { "sft/loss": 1, "act/reward": 0.5 }, 1004);
    store.addStep(3, { "sft/loss": 1.5 }, 1003.5);
    expect(store.get("sft/loss")).toEqual({ key: "sft/loss", steps: [1, 2, 3, 4], values: [3, 2.5, 1.5, 1], times: [0, 2, 3.5, 4] });
    expect(store.get("perf/x")?.values).toEqual([null]);
    expect(store.keys()).toEqual(["act/reward", "perf/x", "sft/loss"]);
    expect(store.points()).toBe(6);
    expect(lastValue(store.get("sft/loss"))).toEqual({ step: 4, value: 1 });
  });

  it("times every series from the run's first recorded metric, history and live alike", () => {
    const store = new SeriesStore([
      { key: "sft/loss", steps: [1, 2], values: [3, 2], wall_times: [500.5, 510] },
      { key: "act/reward", steps: [2], values: [0.1], wall_times: [500] },
    ]);
    expect(store.get("sft/loss")?.times).toEqual([0.5, 10]);
    expect(store.get("act/reward")?.times).toEqual([0]);
    store.addStep(3, { "sft/loss": 1 }, 530);
    expect(store.get("sft/loss")?.times).toEqual([0.5, 10, 30]);
  });

  it("keeps series without wall times off the time axis", () => {
    const store = new SeriesStore([{ key: "old", steps: [1, 2], values: [1, 2] }]);
    expect(onAxis([store.get("old")!], "time")).toEqual([{ key: "old", steps: [], values: [] }]);
    store.addStep(3, { old: 3 }, 100);
    expect(onAxis([store.get("old")!], "time")).toEqual([{ key: "old", steps: [0], values: [3] }]);
    expect(onAxis([store.get("old")!], "step")[0].steps).toEqual([1, 2, 3]);
  });
});

describe("onAxis", () => {
  it("draws series over their times, so runs of different speeds separate", () => {
    const fast = { key: "a", steps: [1, 2, 3], values: [3, 2, 1], times: [0, 1, 2] };
    const slow = { key: "b", steps: [1, 2, 3], values: [3, 2, 1], times: [0, 4, 8] };
    const aligned = align(onAxis([fast, slow], "time"));
    expect(aligned[0]).toEqual([0, 1, 2, 4, 8]);
    expect(aligned[1]).toEqual([3, 2, 1, null, null]);
    expect(aligned[2]).toEqual([3, null, null, 2, 1]);
    expect(TIME_INCRS).toContain(60);
  });
});

describe("ema", () => {
  it("keeps values at weight 0", () => {
    expect(ema([1, null, 3], 0)).toEqual([1, null, 3]);
  });
  it("is debiased: a constant stays constant", () => {
    for (const v of ema([5, 5, 5, 5], 0.9)) expect(v).toBeCloseTo(5, 12);
  });
  it("follows the recurrence and skips nulls", () => {
    const w = 0.5;
    const out = ema([0, null, 4], w);
    // after 0: last = 0 -> 0; after 4: last = 0*0.5 + 0.5*4 = 2, debias 1 - 0.25 -> 2/0.75
    expect(out[0]).toBe(0);
    expect(out[1]).toBeNull();
    expect(out[2]).toBeCloseTo(2 / 0.75, 12);
  });
});

describe("align", () => {
  it("puts series on the union of their steps", () => {
    const a = { key: "a", steps: [1, 2, 4], values: [1, 2, 4] };
    const b = { key: "b", steps: [2, 3], values: [20, 30] };
    expect(align([a, b])).toEqual([[1, 2, 3, 4], [1, 2, null, 4], [null, 20, 30, null]]);
  });

  it("gives what sorting the union gives, for rising, shared, unsorted and repeated steps", () => {
    // The reference: every step once, sorted; each series' value at it (its last for a repeat).
    const reference = (series: { steps: number[]; values: (number | null)[] }[]): Aligned => {
      const xs = [...new Set(series.flatMap((s) => s.steps))].sort((p, q) => p - q);
      return [
        xs,
        ...series.map((s) => {
          const row: (number | null)[] = xs.map(() => null);
          s.steps.forEach((step, i) => (row[xs.indexOf(step)] = s.values[i]));
          return row;
        }),
      ];
    };
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const rising = (n: number) => {
      const steps: number[] = [];
      for (let x = 0; steps.length < n; x++) if (next() < 0.5) steps.push(x);
      return steps;
    };
    const shared = rising(40);
    const cases = [
      [rising(30), rising(50), rising(5)],
      [shared, [...shared], shared],
      [[5, 1, 3], [2, 3]],
      [[1, 2, 2, 3], [3, 4]],
      [[], rising(10)],
    ];
    for (const stepsList of cases) {
      const series = stepsList.map((steps, k) => ({ key: `s${k}`, steps, values: steps.map((_, i) => (i % 7 === 3 ? null : k * 1000 + i)) }));
      expect(align(series)).toEqual(reference(series));
    }
  });

  it("aligns a million points per series that share their steps", () => {
    const n = 1_000_000;
    const steps = Array.from({ length: n }, (_, i) => i * 2);
    const series = [0, 1, 2].map((k) => ({ key: `s${k}`, steps, values: steps.map((x) => x + k) }));
    const [xs, ...ys] = align(series);
    expect(xs.length).toBe(n);
    expect(xs[n - 1]).toBe(2 * (n - 1));
    expect(ys.map((y) => y[n - 1])).toEqual([2 * (n - 1), 2 * (n - 1) + 1, 2 * (n - 1) + 2]);
  });
});

describe("decimate", () => {
  it("returns small data unchanged", () => {
    const data: Aligned = [[1, 2, 3], [1, null, 3]];
    expect(decimate(data, 10)).toEqual(data);
  });

  it("keeps every bucket's min and max, and the ends", () => {
    const xs = Array.from({ length: 100 }, (_, i) => i);
    const ys = xs.map((i) => (i === 37 ? 1000 : i === 62 ? -1000 : Math.sin(i)));
    const [dx, dy] = decimate([xs, ys], 10);
    expect(dx.length).toBeLessThanOrEqual(2 * 10 + 2);
    expect(dx[0]).toBe(0);
    expect(dx[dx.length - 1]).toBe(99);
    expect(dy).toContain(1000);
    expect(dy).toContain(-1000);
    expect([...dx].sort((a, b) => a - b)).toEqual(dx);
  });

  it("decimates the zoomed range only, with one point beyond each edge", () => {
    const xs = Array.from({ length: 1000 }, (_, i) => i);
    const ys = xs.map((i) => i % 7);
    const [dx] = decimate([xs, ys], 1000, 100, 199);
    expect(dx[0]).toBe(99);
    expect(dx[dx.length - 1]).toBe(200);
    expect(dx.length).toBe(102);
  });

  it("brings a million points per series down to a few thousand, fast", () => {
    const n = 1_000_000;
    const xs = new Array<number>(n);
    const a = new Array<number | null>(n);
    const b = new Array<number | null>(n);
    for (let i = 0; i < n; i++) {
      xs[i] = i;
      a[i] = Math.sin(i / 1000) + (i === 123_457 ? 50 : 0);
      b[i] = i % 10 === 0 ? null : Math.cos(i / 777);
    }
    const started = performance.now();
    const out = decimate([xs, a, b], 1000);
    const ms = performance.now() - started;
    expect(out[0].length).toBeLessThanOrEqual(4 * 1000 + 2);
    expect(out[1]).toContain(a[123_457]);
    expect(Math.max(...(out[1].filter((v) => v !== null) as number[]))).toBe(a[123_457]);
    // Generous bound on a loaded shared CPU: the point is milliseconds, not seconds.
    expect(ms).toBeLessThan(1500);
  });
});

describe("formatting", () => {
  it("formats values and durations", () => {
    expect(formatValue(0.123456)).toBe("0.1235");
    expect(formatValue(null)).toBe("–");
    expect(formatValue(1e-5)).toBe("1.000e-5");
    expect(formatDuration(3725)).toBe("1h 02m");
    expect(formatDuration(65)).toBe("1m 05s");
    expect(formatDuration(null)).toBe("–");
  });
});

describe("flatRange", () => {
  it("widens only a flat range", () => {
    expect(flatRange(0, 0)).toEqual([-1, 1]);
    expect(flatRange(6.2, 6.2)).toEqual([6.2 - 0.62, 6.2 + 0.62]);
    expect(flatRange(-2, -2)).toEqual([-2.2, -1.8]);
    expect(flatRange(1, 3)).toEqual([1, 3]);
  });
});

describe("benchmark results", () => {
  const series = [
    { benchmark: "tau2_retail", category: "all", metric: "pass^1", steps: [2, 4], values: [0.2, 0.3] },
    { benchmark: "bfcl", category: "simple", metric: "accuracy", steps: [2, 4, 6], values: [0.5, 0.6, null] },
    { benchmark: "bfcl", category: "multiple", metric: "accuracy", steps: [6], values: [null] },
  ];
  it("lists benchmarks and their latest finite values", () => {
    expect(benchmarks(series)).toEqual(["bfcl", "tau2_retail"]);
    expect(latestBars(series, "bfcl")).toEqual([{ label: "simple/accuracy", value: 0.6, step: 4 }]);
    expect(latestBars(series, "tau2_retail")).toEqual([{ label: "all/pass^1", value: 0.3, step: 4 }]);
  });
});

describe("rehearsal-budget curves", () => {
  const g = "generated_test";
  const series = [
    { benchmark: g, category: "all", metric: "success", steps: [10, 20], values: [0.1, 0.3] },
    { benchmark: g, category: "all", metric: "score", steps: [10, 20], values: [0.2, 0.4] },
    { benchmark: g, category: "rehearsal/parallel/4", metric: "success", steps: [10, 20], values: [0.0, 0.5] },
    { benchmark: g, category: "rehearsal/parallel/1", metric: "success", steps: [20], values: [0.35] },
    { benchmark: g, category: "rehearsal/sequential/2", metric: "success", steps: [20], values: [0.25] },
    { benchmark: g, category: "rehearsal/sequential/3", metric: "success", steps: [10], values: [0.9] },
    { benchmark: "bfcl", category: "rehearsal/parallel/8", metric: "accuracy", steps: [30], values: [1] },
  ];
  it("draws each style's score against N at the latest step, starting from the plain evaluation", () => {
    expect(budgetCurves(series, g)).toEqual({
      step: 20,
      curves: [
        { key: "parallel/success", steps: [0, 1, 4], values: [0.3, 0.35, 0.5] },
        { key: "sequential/success", steps: [0, 2], values: [0.3, 0.25] },
      ],
    });
  });
  it("starts a curve from its own N = 0 when it ran on fewer tasks than the plain evaluation", () => {
    const own = [...series, { benchmark: g, category: "rehearsal/parallel/0", metric: "success", steps: [20], values: [0.2] }];
    expect(budgetCurves(own, g)?.curves).toEqual([
      { key: "parallel/success", steps: [0, 1, 4], values: [0.2, 0.35, 0.5] },
      { key: "sequential/success", steps: [0, 2], values: [0.3, 0.25] },
    ]);
  });
  it("has no curves without budget points, and keeps them out of the latest-value bars", () => {
    expect(budgetCurves(series.slice(0, 2), g)).toBeNull();
    expect(latestBars(series, g).map((b) => b.label)).toEqual(["all/success", "all/score"]);
  });
});

describe("heatGrid", () => {
  const store = new SeriesStore();
  store.addStep(3, { "fidelity/get_order/value_accuracy": 0.5, "fidelity/value_accuracy": 0.5, "fidelity/cancel/key_f1": 1 });
  store.addStep(4, { "fidelity/get_order/value_accuracy": 1, "fidelity/cancel/value_accuracy": 0 });
  store.addStep(5, { "fidelity/get_order/value_accuracy": null });
  store.addStep(6, { "fidelity/cancel/value_accuracy": 0.25 });
  it("has a row per tool and a column per step", () => {
    expect(heatGrid(store, "value_accuracy", 100)).toEqual({
      tools: ["cancel", "get_order"],
      steps: [3, 4, 5, 6],
      cells: [
        [null, 0, null, 0.25],
        [0.5, 1, null, null],
      ],
    });
  });
  it("averages neighbouring steps when columns are fewer than steps", () => {
    expect(heatGrid(store, "value_accuracy", 2)).toEqual({
      tools: ["cancel", "get_order"],
      steps: [3, 5],
      cells: [
        [0, 0.25],
        [0.75, null],
      ],
    });
  });
  it("colours from red to green, grey for no value", () => {
    expect(heatColor(null)).toBe("#e7eaec");
    expect(heatColor(0)).toMatch(/^hsl\(0,/);
    expect(heatColor(1)).toMatch(/^hsl\(120,/);
    expect(heatColor(7)).toBe(heatColor(1));
  });
});

describe("seed groups", () => {
  const runs = [
    { id: 1, name: "tiny", arm: 1, setup: { seed: "7" } },
    { id: 2, name: "tiny", arm: 1, setup: { seed: "8" } },
    { id: 3, name: "tiny-lr", arm: 3, setup: { seed: "7" } },
    { id: 4, name: "tiny-b", arm: 1, setup: { seed: "9" } },
    { id: 5, name: "old", arm: 5, setup: null },
  ];
  it("makes one arm of the ticked runs that differ only in seed", () => {
    expect(seedArms(runs, [4, 3, 1, 5, 2], true)).toEqual([
      { id: 1, label: "tiny / tiny-b × 3 seeds (runs 1, 2, 4)", runs: [1, 2, 4], seeds: ["7", "8", "9"] },
      { id: 3, label: "run 3 · tiny-lr", runs: [3], seeds: ["7"] },
      { id: 5, label: "run 5 · old", runs: [5], seeds: ["?"] },
    ]);
    // Runs left unticked stay out of their arm.
    expect(seedArms(runs, [2], true)).toEqual([{ id: 2, label: "run 2 · tiny", runs: [2], seeds: ["8"] }]);
  });
  it("keeps every run apart when grouping is off", () => {
    expect(seedArms(runs, [2, 1], false).map((a) => a.label)).toEqual(["run 1 · tiny", "run 2 · tiny"]);
  });
});

describe("mean and band over seeds", () => {
  const a = { key: "k", steps: [0, 1, 2], values: [1, 2, null], times: [0, 10, 20] };
  const b = { key: "k", steps: [0, 1, 3], values: [3, 2, 5], times: [2, 12, 30] };
  const c = { key: "k", steps: [0], values: [5], times: [4] };
  it("draws the mean ± the sample standard deviation", () => {
    // Step 0: {1, 3, 5}: mean 3, sd 2. Step 1: {2, 2}: sd 0. Step 2: no value. Step 3: one value, no band.
    expect(meanBand("k", [a, b, c], "sd")).toEqual({
      key: "k",
      steps: [0, 1, 2, 3],
      values: [3, 2, null, 5],
      lower: [1, 2, null, null],
      upper: [5, 2, null, null],
      times: [2, 11, 20, 30],
    });
  });
  it("or ± the standard error of the mean, sd / √n", () => {
    const se = 2 / Math.sqrt(3);
    const band = meanBand("k", [a, b, c], "se");
    expect(band.lower?.[0]).toBeCloseTo(3 - se, 12);
    expect(band.upper?.[0]).toBeCloseTo(3 + se, 12);
  });
  it("draws a single run ± its own stored standard error, in either mode", () => {
    const run = { key: "all/score", steps: [2, 4], values: [0.5, 0.6], se: [0.1, null] };
    for (const kind of ["sd", "se"] as const) {
      const band = meanBand("all/score", [run], kind);
      expect(band.values).toEqual([0.5, 0.6]);
      expect(band.lower?.[0]).toBeCloseTo(0.4, 12);
      expect(band.upper?.[0]).toBeCloseTo(0.6, 12);
      expect(band.lower?.[1]).toBeNull();
    }
    // Without standard errors there is no band at all.
    expect(meanBand("x", [{ key: "x", steps: [1], values: [2] }], "sd")).toEqual({ key: "x", steps: [1], values: [2] });
  });
});

describe("pass@k and checkpoints", () => {
  const g = "generated_test";
  const series = [
    { benchmark: g, category: "all", metric: "score", steps: [3, 5], values: [0.1, 0.2] },
    { benchmark: g, category: "all", metric: "score_se", steps: [3, 5], values: [0.05, 0.04] },
    { benchmark: g, category: "all", metric: "pass@2", steps: [3, 5], values: [0.3, 0.5] },
    { benchmark: g, category: "all", metric: "pass@1", steps: [3, 5], values: [0.2, 0.25] },
    { benchmark: g, category: "all", metric: "pass@1_se", steps: [3, 5], values: [0.1, 0.02] },
    { benchmark: g, category: "all", metric: "pass@2_se", steps: [5], values: [0.03] },
    { benchmark: g, category: "family/unit", metric: "pass@1", steps: [5], values: [1] },
    { benchmark: g, category: "rehearsal/parallel/1", metric: "score", steps: [6], values: [0.3] },
    { benchmark: g, category: "rehearsal/parallel/1", metric: "score_se", steps: [6], values: [0.1] },
    { benchmark: "bfcl", category: "all", metric: "pass@1", steps: [9], values: [1] },
  ];
  it("draws pass@k against k at a step, with its standard errors", () => {
    expect(passAtK(series, g, 5)).toEqual({ key: "all/pass@k", steps: [1, 2], values: [0.25, 0.5], se: [0.02, 0.03] });
    expect(passAtK(series, g, 3)).toEqual({ key: "all/pass@k", steps: [1, 2], values: [0.2, 0.3], se: [0.1, null] });
    expect(passAtK(series, g, 5, "family/unit")).toEqual({ key: "family/unit/pass@k", steps: [1], values: [1] });
    expect(passAtK(series, g, 4)).toBeNull();
  });
  it("lists the steps with pass@k or budget points", () => {
    expect(curveSteps(series, g)).toEqual([3, 5, 6]);
    expect(curveSteps(series, "bfcl")).toEqual([9]);
  });
  it("carries a budget curve's standard errors, at the step asked for", () => {
    expect(budgetCurves(series, g, 6)).toEqual({ step: 6, curves: [{ key: "parallel/score", steps: [1], values: [0.3], se: [0.1] }] });
    expect(budgetCurves(series, g, 5)).toBeNull();
  });
  it("gives a benchmark metric over steps with its standard errors", () => {
    expect(evalCurve(series, g, "all", "score")).toEqual({ key: "all/score", steps: [3, 5], values: [0.1, 0.2], se: [0.05, 0.04] });
    expect(evalCurve(series, g, "all", "nothing")).toBeNull();
  });
});

describe("drift alarm", () => {
  const store = (rows: [number, Record<string, number | null>][]) => {
    const s = new SeriesStore();
    for (const [step, metrics] of rows) s.addStep(step, metrics, step);
    return s;
  };
  const rates = (rehearsed: number[], real: number[], first = 10) =>
    rehearsed.map((r, i): [number, Record<string, number | null>] => [first + i, { "drift/rehearsed_error_rate": r, "drift/real_error_rate": real[i] }]);

  it("fires when the simulator's error rate falls well below the real one's, from the step it started", () => {
    // Means over 3 steps: at 12 (0.3 vs 0.3) no, at 13 (0.2 vs 0.3) no, at 14 (0.1 ≤ 0.15) yes.
    const alarm = driftAlarm(store(rates([0.3, 0.3, 0.3, 0, 0, 0, 0.05], [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3])), false);
    expect(alarm.on).toBe(true);
    expect(alarm.since).toBe(14);
    expect(alarm.errorRate).toMatchObject({ on: true, since: 14, until: null, step: 16, averaged: 3 });
    expect(alarm.errorRate?.rehearsed).toBeCloseTo(0.05 / 3, 12);
    expect(alarm.errorRate?.real).toBeCloseTo(0.3, 12);
    expect(alarm.reward).toBeNull();
  });

  it("stays quiet when both worlds err alike, or the real one hardly errs", () => {
    expect(driftAlarm(store(rates([0.2, 0.25, 0.2, 0.3], [0.3, 0.3, 0.3, 0.3])), false)).toMatchObject({ on: false, since: null, errorRate: { on: false, since: null } });
    // Real errors under DRIFT_RULE.minRealErrorRate: no alarm even with no rehearsed errors.
    expect(driftAlarm(store(rates([0, 0, 0, 0], [0.05, 0.05, 0.05, 0.05])), false).on).toBe(false);
    expect(DRIFT_RULE.minRealErrorRate).toBe(0.1);
    // Fewer steps with data than the window: figures so far, but no alarm yet.
    expect(driftAlarm(store(rates([0, 0], [0.5, 0.5])), false).errorRate).toEqual({ on: false, since: null, until: null, step: 11, rehearsed: 0, real: 0.5, averaged: 2 });
    // No replayed calls at all.
    expect(driftAlarm(store([[1, { "rl/reward": 0.5 }]]), false)).toEqual({ on: false, since: null, errorRate: null, reward: null });
  });

  it("remembers a period that has ended", () => {
    const alarm = driftAlarm(store(rates([0, 0, 0, 0.3, 0.3, 0.3], [0.3, 0.3, 0.3, 0.3, 0.3, 0.3])), false);
    // Windows end at 12 (0 vs 0.3: on), 13 (0.1: on), 14 (0.2: off), 15 (0.3: off).
    expect(alarm.on).toBe(false);
    expect(alarm.errorRate).toMatchObject({ on: false, since: 12, until: 13 });
  });

  it("fires on rehearsed reward pulling ahead of the held-out real score, only when asked", () => {
    const rows: [number, Record<string, number | null>][] = [];
    for (let step = 3; step <= 12; step++) rows.push([step, { "rl/reward": step < 7 ? 0.3 : 0.8 }]);
    // Held-out scores (real environment) at 3, 6, 9, 12 stay at 0.2.
    for (const step of [3, 6, 9, 12]) rows.push([step, { "eval/generated_test/score": 0.2 }]);
    const s = store(rows);
    // Gap 0.1 at step 3 (the baseline), 0.1 at 6, then 0.6: 0.5 more than at the start.
    const alarm = driftAlarm(s, true);
    expect(alarm.reward).toMatchObject({ on: true, since: 9, until: null, step: 12, real: 0.2, averaged: 3 });
    expect(alarm.reward?.baseline).toBeCloseTo(0.1, 12);
    expect(alarm).toMatchObject({ on: true, since: 9 });
    expect(driftAlarm(s, false)).toMatchObject({ on: false, reward: null });
  });

  it("dates the alarm from the earliest half that is on", () => {
    const rows = rates([0, 0, 0, 0, 0, 0], [0.4, 0.4, 0.4, 0.4, 0.4, 0.4], 5);
    for (let step = 5; step <= 10; step++) rows.push([step, { "rl/reward": step < 8 ? 0.2 : 0.9 }]);
    for (const step of [5, 8, 10]) rows.push([step, { "eval/generated_test/score": 0.1 }]);
    const alarm = driftAlarm(store(rows), true);
    expect(alarm.errorRate?.since).toBe(7);
    // At 8 the rewards of steps 6–8 average 0.43: a gap of 0.33 against 0.1 at step 5.
    expect(alarm.reward?.since).toBe(8);
    expect(alarm.since).toBe(7);
  });
});
