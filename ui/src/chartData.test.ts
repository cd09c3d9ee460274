// Unit tests of the chart data transforms: chart key matching, the live series store, EMA,
// alignment and min/max decimation (including a million-point series).
import { describe, expect, it } from "vitest";
import { CHARTS, SeriesStore, TIME_INCRS, align, onAxis, benchmarks, decimate, ema, flatRange, formatDuration, formatValue, heatColor, heatGrid, keysFor, lastValue, latestBars, budgetCurves, type Aligned } from "./chartData";

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
