// Chart data transforms, pure and DOM-free: which metric keys go in which chart, a live store
// of series fed by step events, EMA smoothing, alignment of several series on one x axis,
// min/max bucket decimation so a million points per series stay interactive, benchmark
// results' latest values, and the per-tool × step fidelity grid of the heatmap.

/** One metric over steps; `null` marks a value that was not finite. */
export interface Series {
  key: string;
  steps: number[];
  values: (number | null)[];
  /** Seconds since the run's first recorded metric, one per step (the wall-time axis). */
  times?: number[];
}

/** A run's metric as the host sends it: steps, values and epoch seconds of each. */
export interface TimedSeries {
  key: string;
  steps: number[];
  values: (number | null)[];
  wall_times?: (number | null)[];
}

/** The chart's x axis: training steps, or wall time since the run's first metric. */
export type XAxis = "step" | "time";

/**
 * The series as drawn on `axis`: over steps as they are, or over their `times` (series without
 * times have no points on the time axis).
 */
export function onAxis(series: readonly Series[], axis: XAxis): Series[] {
  if (axis === "step") return [...series];
  return series.map((s) => {
    const times = s.times;
    if (!times || times.length !== s.values.length) return { key: s.key, steps: [], values: [] };
    if (times.every(Number.isFinite)) return { key: s.key, steps: times, values: s.values };
    const steps: number[] = [];
    const values: (number | null)[] = [];
    times.forEach((t, i) => {
      if (Number.isFinite(t)) {
        steps.push(t);
        values.push(s.values[i]);
      }
    });
    return { key: s.key, steps, values };
  });
}

/** Wall-time axis splits: round numbers of seconds, minutes and hours. */
export const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400];

/** Series on one shared x axis, as uPlot takes them: `[xs, ys1, ys2, …]`. */
export type Aligned = [number[], ...(number | null)[][]];

/** A chart of the training view: a title and the metric keys it draws. */
export interface ChartDef {
  id: string;
  title: string;
  matches: (key: string) => boolean;
}

const FIDELITY_SCORES = ["valid_json", "outcome_agreement", "key_f1", "value_accuracy", "exact_match"];

/** The training view's charts, in display order. */
export const CHARTS: ChartDef[] = [
  { id: "reward", title: "Reward per role", matches: (k) => /^(act|rehearse|rl)\/reward$/.test(k) },
  { id: "sft-loss", title: "SFT loss", matches: (k) => /^sft\/loss(_act|_rehearse)?$/.test(k) },
  { id: "advantage", title: "Advantage (mean, std)", matches: (k) => /^(act|rehearse)\/advantage_(mean|std)$/.test(k) },
  { id: "kl", title: "KL to the reference", matches: (k) => /^(act|rehearse)\/kl$/.test(k) },
  { id: "entropy", title: "Entropy", matches: (k) => /^(act|rehearse)\/entropy$/.test(k) },
  { id: "clip", title: "Clip fraction", matches: (k) => /^(act|rehearse)\/clip_fraction$/.test(k) },
  { id: "length", title: "Response length", matches: (k) => /^(act|rehearse)\/response_length$/.test(k) },
  {
    id: "fidelity",
    title: "Fidelity (all tools)",
    matches: (k) => k.startsWith("fidelity/") && FIDELITY_SCORES.includes(k.slice("fidelity/".length)),
  },
  {
    id: "fidelity-tool",
    title: "Fidelity per tool (value accuracy)",
    matches: (k) => /^fidelity\/[^/]+\/value_accuracy$/.test(k),
  },
];

/** The keys among `keys` that `chart` draws, sorted. */
export function keysFor(chart: ChartDef, keys: Iterable<string>): string[] {
  return [...keys].filter((k) => chart.matches(k)).sort();
}

/** A run's metrics, grown one step at a time (live) or loaded whole (history). */
export class SeriesStore {
  private readonly byKey = new Map<string, Series>();
  /** Epoch seconds of the run's first recorded metric: time zero of the wall-time axis. */
  private start: number | null = null;

  constructor(initial: TimedSeries[] = []) {
    for (const s of initial) for (const t of s.wall_times ?? []) if (t !== null && Number.isFinite(t) && (this.start === null || t < this.start)) this.start = t;
    for (const s of initial) {
      const walls = s.wall_times && s.wall_times.length === s.steps.length ? s.wall_times : null;
      const times = walls ? walls.map((t) => (t === null ? Number.NaN : t - (this.start ?? t))) : s.steps.map(() => Number.NaN);
      this.byKey.set(s.key, { key: s.key, steps: [...s.steps], values: [...s.values], times });
    }
  }

  /**
   * Adds one step's metrics, recorded at `wallTime` (epoch seconds); a step seen again replaces
   * its value and time (a resumed job repeats it).
   */
  addStep(step: number, metrics: Partial<Record<string, number | null>>, wallTime: number | null = null): void {
    const wall = wallTime !== null && Number.isFinite(wallTime) ? wallTime : Date.now() / 1000;
    if (this.start === null) this.start = wall;
    const time = wall - this.start;
    for (const [key, value] of Object.entries(metrics)) {
      if (value === undefined) continue;
      let s = this.byKey.get(key);
      if (!s) {
        s = { key, steps: [], values: [], times: [] };
        this.byKey.set(key, s);
      }
      const times = (s.times ??= s.steps.map(() => Number.NaN));
      const last = s.steps.length - 1;
      if (last >= 0 && s.steps[last] === step) {
        s.values[last] = value;
        times[last] = time;
      } else if (last >= 0 && s.steps[last] > step) {
        const at = s.steps.findIndex((x) => x >= step);
        if (s.steps[at] === step) {
          s.values[at] = value;
          times[at] = time;
        } else {
          s.steps.splice(at, 0, step);
          s.values.splice(at, 0, value);
          times.splice(at, 0, time);
        }
      } else {
        s.steps.push(step);
        s.values.push(value);
        times.push(time);
      }
    }
  }

  keys(): string[] {
    return [...this.byKey.keys()].sort();
  }

  get(key: string): Series | undefined {
    return this.byKey.get(key);
  }

  /** Number of points over every series. */
  points(): number {
    let n = 0;
    for (const s of this.byKey.values()) n += s.steps.length;
    return n;
  }
}

/**
 * Exponential moving average with bias correction (as TensorBoard smooths): `weight` 0 keeps
 * the values, 0.99 smooths hard. Nulls stay null and do not move the average.
 */
export function ema(values: readonly (number | null)[], weight: number): (number | null)[] {
  if (!(weight > 0)) return [...values];
  const w = Math.min(weight, 0.9999);
  const out: (number | null)[] = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    last = last * w + (1 - w) * v;
    n++;
    out[i] = last / (1 - Math.pow(w, n));
  }
  return out;
}

/** Whether `xs` rises strictly (no step twice). */
function rising(xs: readonly number[]): boolean {
  if (xs.length > 0 && !(Number.isFinite(xs[0]) && Number.isFinite(xs[xs.length - 1]))) return false;
  for (let i = 1; i < xs.length; i++) if (!(xs[i - 1] < xs[i])) return false;
  return true;
}

/** Whether `a` and `b` hold the same steps. */
function sameSteps(a: readonly number[], b: readonly number[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The union of rising step lists, rising: a k-way merge, linear in the points. */
function mergeSteps(lists: readonly (readonly number[])[]): number[] {
  const at = lists.map(() => 0);
  const xs: number[] = [];
  for (;;) {
    let next = Infinity;
    for (let s = 0; s < lists.length; s++) if (at[s] < lists[s].length && lists[s][at[s]] < next) next = lists[s][at[s]];
    if (next === Infinity) return xs;
    xs.push(next);
    for (let s = 0; s < lists.length; s++) if (at[s] < lists[s].length && lists[s][at[s]] === next) at[s]++;
  }
}

/**
 * Puts several series on the union of their steps, with nulls where one has no value. Series
 * whose steps rise (as a `SeriesStore` keeps them) are merged in linear time, and series
 * sharing the same steps are copied as they are, so a million points per series align in
 * milliseconds; other input is sorted.
 */
export function align(series: readonly Series[]): Aligned {
  if (series.length === 1) return [[...series[0].steps], [...series[0].values]];
  if (series.length > 1 && series.every((s) => s.steps.length === s.values.length && rising(s.steps))) {
    const first = series[0].steps;
    if (series.every((s) => sameSteps(s.steps, first))) return [[...first], ...series.map((s) => [...s.values])];
    const xs = mergeSteps(series.map((s) => s.steps));
    const ys = series.map((s) => {
      const row: (number | null)[] = new Array(xs.length).fill(null);
      let j = 0;
      for (let i = 0; i < s.steps.length; i++) {
        while (xs[j] < s.steps[i]) j++;
        row[j] = s.values[i];
      }
      return row;
    });
    return [xs, ...ys];
  }
  const xs = [...new Set(series.flatMap((s) => s.steps))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = series.map((s) => {
    const row: (number | null)[] = new Array(xs.length).fill(null);
    s.steps.forEach((step, i) => {
      row[index.get(step) ?? 0] = s.values[i];
    });
    return row;
  });
  return [xs, ...ys];
}

/** First index with `xs[i] >= x` in ascending `xs`. */
function lowerBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** First index with `xs[i] > x` in ascending `xs`. */
function upperBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Min/max bucket decimation of aligned data: the x range (all of it, or `[from, to]`) is cut
 * into `buckets` equal index spans, and each span keeps, for every series, the rows of its
 * minimum and maximum (plus the first and last row), so peaks and dips survive at any zoom.
 * One point just outside each end of the range is kept so lines run to the edges. Returns the
 * data unchanged when it is already small enough.
 */
export function decimate(data: Aligned, buckets: number, from?: number, to?: number): Aligned {
  const xs = data[0];
  const ys = data.slice(1) as (number | null)[][];
  const start = from === undefined ? 0 : Math.max(0, lowerBound(xs, from) - 1);
  // Past every x <= to, plus one more.
  const end = to === undefined ? xs.length : Math.min(xs.length, upperBound(xs, to) + 1);
  if (start >= end) return [[], ...ys.map(() => [])] as Aligned;
  const n = end - start;
  if (n <= buckets * 2 || buckets < 1) {
    return [xs.slice(start, end), ...ys.map((y) => y.slice(start, end))] as Aligned;
  }
  const keep = new Uint8Array(n);
  keep[0] = 1;
  keep[n - 1] = 1;
  const span = n / buckets;
  for (let b = 0; b < buckets; b++) {
    const lo = start + Math.floor(b * span);
    const hi = Math.min(end, start + Math.floor((b + 1) * span));
    for (const y of ys) {
      let minI = -1;
      let maxI = -1;
      let minV = Infinity;
      let maxV = -Infinity;
      for (let i = lo; i < hi; i++) {
        const v = y[i];
        if (v === null) continue;
        if (v < minV) {
          minV = v;
          minI = i;
        }
        if (v > maxV) {
          maxV = v;
          maxI = i;
        }
      }
      if (minI >= 0) keep[minI - start] = 1;
      if (maxI >= 0) keep[maxI - start] = 1;
    }
  }
  let count = 0;
  for (let i = 0; i < n; i++) count += keep[i];
  const outX: number[] = new Array(count);
  const outY: (number | null)[][] = ys.map(() => new Array(count));
  let j = 0;
  for (let i = 0; i < n; i++) {
    if (!keep[i]) continue;
    outX[j] = xs[start + i];
    for (let s = 0; s < ys.length; s++) outY[s][j] = ys[s][start + i];
    j++;
  }
  return [outX, ...outY];
}

/** The last non-null value of a series and its step, or `null`. */
export function lastValue(series: Series | undefined): { step: number; value: number } | null {
  if (!series) return null;
  for (let i = series.values.length - 1; i >= 0; i--) {
    const v = series.values[i];
    if (v !== null) return { step: series.steps[i], value: v };
  }
  return null;
}

/** A short, readable form of a metric value. */
export function formatValue(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  const a = Math.abs(value);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return value.toExponential(3);
  return Number(value.toPrecision(4)).toString();
}

/** Seconds as `1h 02m`, `3m 05s` or `12s`. */
export function formatDuration(secs: number | null | undefined): string {
  if (secs === null || secs === undefined || !Number.isFinite(secs) || secs < 0) return "–";
  const s = Math.round(secs);
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}

/**
 * The y range around a flat series: uPlot would show a lone value or a constant on a 0–100
 * axis, so a flat range is widened by a tenth of its magnitude (by 1 around zero).
 */
export function flatRange(min: number, max: number): [number, number] {
  if (min !== max) return [min, max];
  const pad = Math.abs(min) * 0.1 || 1;
  return [min - pad, max + pad];
}

/** Tick spacings of a step axis: whole steps only. */
export const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6];

/** One benchmark metric over evaluated steps (the host's `EvalSeries`, less its task counts). */
export interface EvalLike {
  benchmark: string;
  category: string;
  metric: string;
  steps: number[];
  values: (number | null)[];
}

/** A bar of the latest benchmark values: `category/metric`, its last finite value and step. */
export interface Bar {
  label: string;
  value: number;
  step: number;
}

/** The benchmarks among `series`, sorted. */
export function benchmarks(series: readonly EvalLike[]): string[] {
  return [...new Set(series.map((s) => s.benchmark))].sort();
}

/** Whether a metric is the standard error of another (`<metric>_se`), drawn as its band. */
export function isErrorMetric(metric: string): boolean {
  return metric.endsWith("_se");
}

/** Whether a category is one task family's share of an evaluation (`family/<name>`). */
export function isFamilyCategory(category: string): boolean {
  return category.startsWith("family/") || category.includes("/family/");
}

/**
 * The latest finite value of each series of `benchmark` over all its tasks, labelled
 * `category/metric` (standard errors and per-family figures are left to the charts).
 */
export function latestBars(series: readonly EvalLike[], benchmark: string): Bar[] {
  const bars: Bar[] = [];
  for (const s of series) {
    if (s.benchmark !== benchmark || isBudgetCategory(s.category)) continue;
    if (isErrorMetric(s.metric) || isFamilyCategory(s.category)) continue;
    const last = lastValue({ key: "", steps: s.steps, values: s.values });
    if (last) bars.push({ label: `${s.category}/${s.metric}`, value: last.value, step: last.step });
  }
  return bars;
}

/** The category of a rehearsal-budget point: `rehearsal/<style>/<N>`. */
const CURVE_CATEGORY = /^rehearsal\/(parallel|sequential)\/(\d+)$/;

/** Whether a benchmark category is a rehearsal-budget point (drawn by budget, not by step). */
export function isBudgetCategory(category: string): boolean {
  return CURVE_CATEGORY.test(category);
}

/** The rehearsal-budget curves of one benchmark at one evaluated step. */
export interface BudgetCurves {
  /** The step evaluated: the latest one with budget points. */
  step: number;
  /** `<style>/<metric>` curves over the budget N; N = 0 is the plain evaluation (`all`). */
  curves: Series[];
}

/**
 * Score against the number of imagined attempts, one curve per style (parallel, sequential)
 * and metric, at the latest step of `benchmark` that has budget points; each curve starts at
 * N = 0 with the plain evaluation of that step when there is one. Null when there are none.
 */
export function budgetCurves(series: readonly EvalLike[], benchmark: string): BudgetCurves | null {
  const valueAt = (s: EvalLike, step: number): number | null => {
    for (let i = s.steps.length - 1; i >= 0; i--) if (s.steps[i] === step) return s.values[i] ?? null;
    return null;
  };
  const points = series.filter((s) => s.benchmark === benchmark && isBudgetCategory(s.category));
  const step = Math.max(-Infinity, ...points.flatMap((s) => s.steps));
  if (!Number.isFinite(step)) return null;
  const byKey = new Map<string, Map<number, number | null>>();
  for (const s of points) {
    const match = CURVE_CATEGORY.exec(s.category);
    if (!match || !s.steps.includes(step) || isErrorMetric(s.metric)) continue;
    const key = `${match[1]}/${s.metric}`;
    const curve = byKey.get(key) ?? new Map<number, number | null>();
    curve.set(Number(match[2]), valueAt(s, step));
    byKey.set(key, curve);
  }
  const curves: Series[] = [];
  for (const key of [...byKey.keys()].sort()) {
    const curve = byKey.get(key) ?? new Map<number, number | null>();
    const metric = key.slice(key.indexOf("/") + 1);
    const plain = series.find((s) => s.benchmark === benchmark && s.category === "all" && s.metric === metric);
    const zero = plain ? valueAt(plain, step) : null;
    if (zero !== null) curve.set(0, zero);
    const ns = [...curve.keys()].sort((a, b) => a - b);
    curves.push({ key, steps: ns, values: ns.map((n) => curve.get(n) ?? null) });
  }
  return { step, curves };
}

/** Per-tool fidelity over steps, as the heatmap draws it. */
export interface HeatGrid {
  /** Tools, one row each, sorted. */
  tools: string[];
  /** First step of each column. */
  steps: number[];
  /** `cells[row][column]`: the mean score of the tool over the column's steps; null if none. */
  cells: (number | null)[][];
}

/** The fidelity scores a heatmap can show (`fidelity/<tool>/<score>` metric keys). */
export const HEAT_SCORES = ["value_accuracy", "key_f1", "outcome_agreement", "valid_json", "exact_match"];

/**
 * The per-tool × step grid of one fidelity `score` from a run's metrics, with at most
 * `maxColumns` columns: when there are more steps, neighbouring steps share a column and
 * their values are averaged.
 */
export function heatGrid(store: SeriesStore, score: string, maxColumns: number): HeatGrid {
  const suffix = `/${score}`;
  const rows: { tool: string; series: Series }[] = [];
  for (const key of store.keys()) {
    if (!key.startsWith("fidelity/") || !key.endsWith(suffix)) continue;
    const tool = key.slice("fidelity/".length, key.length - suffix.length);
    if (tool === "" || tool.includes("/")) continue;
    const series = store.get(key);
    if (series) rows.push({ tool, series });
  }
  rows.sort((a, b) => (a.tool < b.tool ? -1 : a.tool > b.tool ? 1 : 0));
  const allSteps = [...new Set(rows.flatMap((r) => r.series.steps))].sort((a, b) => a - b);
  const perColumn = Math.max(1, Math.ceil(allSteps.length / Math.max(1, maxColumns)));
  const steps: number[] = [];
  const columnOf = new Map<number, number>();
  allSteps.forEach((step, i) => {
    const column = Math.floor(i / perColumn);
    if (column === steps.length) steps.push(step);
    columnOf.set(step, column);
  });
  const cells = rows.map(({ series }) => {
    const sums = new Array<number>(steps.length).fill(0);
    const counts = new Array<number>(steps.length).fill(0);
    series.steps.forEach((step, i) => {
      const value = series.values[i];
      const column = columnOf.get(step);
      if (value === null || value === undefined || column === undefined) return;
      sums[column] += value;
      counts[column] += 1;
    });
    return sums.map((sum, c) => (counts[c] > 0 ? sum / counts[c] : null));
  });
  return { tools: rows.map((r) => r.tool), steps, cells };
}

/** A cell's colour: red at 0 through yellow to green at 1; grey when there is no value. */
export function heatColor(value: number | null): string {
  if (value === null) return "#e7eaec";
  const v = Math.min(1, Math.max(0, value));
  const hue = Math.round(120 * v);
  return `hsl(${hue}, 65%, ${Math.round(48 + 10 * (1 - Math.abs(v - 0.5) * 2))}%)`;
}
