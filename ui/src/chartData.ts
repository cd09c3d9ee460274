// Chart data transforms, pure and DOM-free: which metric keys go in which chart, a live store
// of series fed by step events, EMA smoothing, alignment of several series on one x axis,
// min/max bucket decimation so a million points per series stay interactive, benchmark
// results' latest values, and the per-tool × step fidelity grid of the heatmap. Which keys and
// categories exist comes from the engine's catalogue (`METRIC_CATALOGUE` in the bindings).

import { METRIC_CATALOGUE } from "./bindings";

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

/** One metric family of the engine's catalogue (`envace::metrics`). */
export type CatalogueMetric = (typeof METRIC_CATALOGUE.metrics)[number];

/** One evaluation-category family of the engine's catalogue. */
export type CatalogueCategory = (typeof METRIC_CATALOGUE.categories)[number];

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * A pattern of the engine's catalogue as a regular expression, with the engine's rules: `/`
 * separates segments; a segment's `{name}` stands for one of the catalogue's values for `name`,
 * or for any non-empty text without `/` when the catalogue lists none.
 */
export function patternRegex(pattern: string): RegExp {
  const parts = new Map<string, readonly string[]>(METRIC_CATALOGUE.parts.map((p) => [p.name, p.values]));
  const body = pattern
    .split("/")
    .map((segment) => {
      const m = /^([^{]*)\{(\w+)\}(.*)$/.exec(segment);
      if (!m) return escapeRegex(segment);
      const values = parts.get(m[2]);
      const middle = values ? `(?:${values.map(escapeRegex).join("|")})` : "[^/]+";
      return escapeRegex(m[1]) + middle + escapeRegex(m[3]);
    })
    .join("/");
  return new RegExp(`^${body}$`);
}

const METRIC_PATTERNS = METRIC_CATALOGUE.metrics.map((metric) => ({ metric, regex: patternRegex(metric.key) }));
const CATEGORY_PATTERNS = METRIC_CATALOGUE.categories.map((category) => ({ category, regex: patternRegex(category.pattern) }));

/** The catalogue entry of a metric key (the first that matches), or null for an unknown key. */
export function metricOf(key: string): CatalogueMetric | null {
  return METRIC_PATTERNS.find((p) => p.regex.test(key))?.metric ?? null;
}

/** The catalogue entry of an evaluation category, or null. */
export function categoryOf(category: string): CatalogueCategory | null {
  return CATEGORY_PATTERNS.find((p) => p.regex.test(category))?.category ?? null;
}

/** The training view's charts, in display order: each draws the keys the catalogue gives it. */
export const CHARTS: ChartDef[] = METRIC_CATALOGUE.charts.map((chart) => ({
  id: chart.id,
  title: chart.title,
  matches: (key: string) => metricOf(key)?.chart === chart.id,
}));

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

/** The catalogue's pattern of one task family's share of an evaluation. */
const FAMILY_PATTERN = "family/{family}";

/** The catalogue's pattern of a rehearsal-budget point. */
const BUDGET_PATTERN = "rehearsal/{style}/{budget}";

/** Whether a category is one task family's share of an evaluation (`family/<name>`). */
export function isFamilyCategory(category: string): boolean {
  return categoryOf(category)?.pattern === FAMILY_PATTERN || category.includes("/family/");
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

/** Style and budget N of a rehearsal-budget point's category, or null for another category. */
function budgetPoint(category: string): { style: string; budget: number } | null {
  if (categoryOf(category)?.pattern !== BUDGET_PATTERN) return null;
  const [, style, n] = category.split("/");
  const budget = Number(n);
  return Number.isInteger(budget) && budget >= 0 ? { style, budget } : null;
}

/** Whether a benchmark category is a rehearsal-budget point (drawn by budget, not by step). */
export function isBudgetCategory(category: string): boolean {
  return budgetPoint(category) !== null;
}

/** The rehearsal-budget curves of one benchmark at one evaluated step. */
export interface BudgetCurves {
  /** The step evaluated: the one asked for, else the latest one with budget points. */
  step: number;
  /**
   * `<style>/<metric>` curves over the budget N; N = 0 is the curve's own point when it was
   * stored (`rehearsal/<style>/0`: a curve on fewer tasks), else the plain evaluation (`all`). A curve
   * carries `se` when standard errors (`<metric>_se`) were stored for its points.
   */
  curves: SeSeries[];
}

/** The value of `s` at `step` (its newest when repeated), or null. */
function valueAt(s: EvalLike | undefined, step: number): number | null {
  if (!s) return null;
  for (let i = s.steps.length - 1; i >= 0; i--) if (s.steps[i] === step) return s.values[i] ?? null;
  return null;
}

/**
 * Score against the number of imagined attempts, one curve per style (parallel, sequential)
 * and metric, at `step` (default: the latest step of `benchmark` that has budget points); each
 * curve starts at N = 0 with the plain evaluation of that step when there is one. Null when
 * that step has none.
 */
export function budgetCurves(series: readonly EvalLike[], benchmark: string, at?: number): BudgetCurves | null {
  const points = series.filter((s) => s.benchmark === benchmark && isBudgetCategory(s.category));
  const step = at ?? Math.max(-Infinity, ...points.flatMap((s) => s.steps));
  if (!Number.isFinite(step)) return null;
  const byKey = new Map<string, Map<number, [number | null, number | null]>>();
  for (const s of points) {
    const point = budgetPoint(s.category);
    if (!point || !s.steps.includes(step) || isErrorMetric(s.metric)) continue;
    const key = `${point.style}/${s.metric}`;
    const curve = byKey.get(key) ?? new Map<number, [number | null, number | null]>();
    const se = series.find((e) => e.benchmark === benchmark && e.category === s.category && e.metric === `${s.metric}_se`);
    curve.set(point.budget, [valueAt(s, step), valueAt(se, step)]);
    byKey.set(key, curve);
  }
  if (byKey.size === 0) return null;
  const curves: SeSeries[] = [];
  for (const key of [...byKey.keys()].sort()) {
    const curve = byKey.get(key) ?? new Map<number, [number | null, number | null]>();
    const metric = key.slice(key.indexOf("/") + 1);
    const find = (m: string) => series.find((s) => s.benchmark === benchmark && s.category === "all" && s.metric === m);
    // A curve on fewer tasks than the plain evaluation stores its own N = 0 on those tasks.
    const zero = curve.has(0) ? null : valueAt(find(metric), step);
    if (zero !== null) curve.set(0, [zero, valueAt(find(`${metric}_se`), step)]);
    const ns = [...curve.keys()].sort((a, b) => a - b);
    const out: SeSeries = { key, steps: ns, values: ns.map((n) => curve.get(n)?.[0] ?? null) };
    const se = ns.map((n) => curve.get(n)?.[1] ?? null);
    if (se.some((v) => v !== null)) out.se = se;
    curves.push(out);
  }
  return { step, curves };
}

/** `pass@k` metrics: k from the name. */
const PASS_AT = /^pass@(\d+)$/;

/**
 * The pass@k curve (k on the x axis) of `benchmark`'s `category` at `step`, with the stored
 * standard errors (`pass@k_se`) as `se`; null when that step has no pass@k.
 */
export function passAtK(series: readonly EvalLike[], benchmark: string, step: number, category = "all"): SeSeries | null {
  const points: [number, number | null, number | null][] = [];
  for (const s of series) {
    const match = PASS_AT.exec(s.metric);
    if (s.benchmark !== benchmark || s.category !== category || !match || !s.steps.includes(step)) continue;
    const se = series.find((e) => e.benchmark === benchmark && e.category === category && e.metric === `${s.metric}_se`);
    points.push([Number(match[1]), valueAt(s, step), valueAt(se, step)]);
  }
  if (points.length === 0) return null;
  points.sort((a, b) => a[0] - b[0]);
  const out: SeSeries = { key: `${category}/pass@k`, steps: points.map((p) => p[0]), values: points.map((p) => p[1]) };
  if (points.some((p) => p[2] !== null)) out.se = points.map((p) => p[2]);
  return out;
}

/** The steps of `benchmark` evaluated with pass@k or rehearsal-budget points, ascending. */
export function curveSteps(series: readonly EvalLike[], benchmark: string): number[] {
  const steps = new Set<number>();
  for (const s of series) {
    if (s.benchmark !== benchmark || isErrorMetric(s.metric)) continue;
    if (isBudgetCategory(s.category) || PASS_AT.test(s.metric)) for (const step of s.steps) steps.add(step);
  }
  return [...steps].sort((a, b) => a - b);
}

/** One benchmark metric over steps, with its stored standard errors as `se` when there are any. */
export function evalCurve(series: readonly EvalLike[], benchmark: string, category: string, metric: string): SeSeries | null {
  const s = series.find((e) => e.benchmark === benchmark && e.category === category && e.metric === metric);
  if (!s) return null;
  const out: SeSeries = { key: `${category}/${metric}`, steps: [...s.steps], values: [...s.values] };
  const se = series.find((e) => e.benchmark === benchmark && e.category === category && e.metric === `${metric}_se`);
  if (se) out.se = s.steps.map((step) => valueAt(se, step));
  return out;
}

/** A series whose values carry their own standard errors (`<metric>_se`), one per step. */
export interface SeSeries extends Series {
  se?: (number | null)[];
}

/** A series with a band around it: `lower` and `upper` bounds, one per step (null: none there). */
export interface BandedSeries extends Series {
  lower?: (number | null)[];
  upper?: (number | null)[];
}

/**
 * The band around a mean over seeds: ± one sample standard deviation, or ± one standard error
 * of the mean (sd / √n).
 */
export type BandKind = "sd" | "se";

/**
 * The mean of `members` (one metric of the runs of an arm) at every step any of them has,
 * with a band of ± one sample standard deviation (`sd`) or ± one standard error of the mean
 * (`se`: sd / √n) over the n members with a value at that step. Where only one member has a
 * value, its own stored standard error (`se` of the member, e.g. `score_se` over tasks) is
 * the band, so a single run is drawn ± its standard error; else there is no band there. Each
 * point's time is the mean of the members' times at that step.
 */
export function meanBand(key: string, members: readonly SeSeries[], kind: BandKind): BandedSeries {
  const steps = [...new Set(members.flatMap((m) => m.steps))].sort((a, b) => a - b);
  const at = members.map((m) => new Map(m.steps.map((step, i) => [step, i])));
  const values: (number | null)[] = [];
  const lower: (number | null)[] = [];
  const upper: (number | null)[] = [];
  const times: number[] = [];
  for (const step of steps) {
    const vals: number[] = [];
    let own: number | null = null;
    let timeSum = 0;
    let timeN = 0;
    members.forEach((m, j) => {
      const i = at[j].get(step);
      if (i === undefined) return;
      const t = m.times?.[i];
      if (t !== undefined && Number.isFinite(t)) {
        timeSum += t;
        timeN++;
      }
      const v = m.values[i];
      if (v === null || v === undefined || !Number.isFinite(v)) return;
      vals.push(v);
      own = m.se?.[i] ?? null;
    });
    times.push(timeN > 0 ? timeSum / timeN : Number.NaN);
    const n = vals.length;
    if (n === 0) {
      values.push(null);
      lower.push(null);
      upper.push(null);
      continue;
    }
    const mean = vals.reduce((a, b) => a + b, 0) / n;
    let half: number | null = null;
    if (n >= 2) {
      const sd = Math.sqrt(vals.reduce((a, v) => a + (v - mean) * (v - mean), 0) / (n - 1));
      half = kind === "sd" ? sd : sd / Math.sqrt(n);
    } else if (own !== null && Number.isFinite(own)) {
      half = Math.abs(own);
    }
    values.push(mean);
    lower.push(half === null ? null : mean - half);
    upper.push(half === null ? null : mean + half);
  }
  const out: BandedSeries = { key, steps, values };
  if (times.some(Number.isFinite)) out.times = times;
  if (lower.some((v) => v !== null)) {
    out.lower = lower;
    out.upper = upper;
  }
  return out;
}

/** A run as the compare view groups it (the host's `RunInfo`). */
export interface RunLike {
  id: number;
  name: string;
  /** The smallest id of the runs whose configs differ from its own only in seed and name. */
  arm: number;
  setup: { seed: string } | null;
}

/** Runs drawn as one mean (with a band) in the compare view. */
export interface Arm {
  /** Its smallest run id. */
  id: number;
  /** `run 3 · name` for one run, `name × 3 seeds (runs 1, 2, 3)` for several. */
  label: string;
  /** Its runs, ascending. */
  runs: number[];
  /** Their seeds, in the same order (`?` where a config did not parse). */
  seeds: string[];
}

/**
 * The arms of the `ticked` runs: with `group`, runs that differ only in seed (the same `arm`)
 * make one arm; without, every run is its own. Arms come in order of their smallest run id.
 */
export function seedArms(runs: readonly RunLike[], ticked: readonly number[], group: boolean): Arm[] {
  const byId = new Map(runs.map((r) => [r.id, r]));
  const arms = new Map<number, RunLike[]>();
  for (const id of ticked) {
    const run = byId.get(id);
    if (!run) continue;
    const key = group ? run.arm : run.id;
    const members = arms.get(key) ?? [];
    if (!members.some((m) => m.id === id)) members.push(run);
    arms.set(key, members);
  }
  return [...arms.values()]
    .map((members) => {
      members.sort((a, b) => a.id - b.id);
      const ids = members.map((m) => m.id);
      const names = [...new Set(members.map((m) => m.name))].join(" / ");
      return {
        id: ids[0],
        label: members.length === 1 ? `run ${ids[0]} · ${members[0].name}` : `${names} × ${members.length} seeds (runs ${ids.join(", ")})`,
        runs: ids,
        seeds: members.map((m) => m.setup?.seed ?? "?"),
      };
    })
    .sort((a, b) => a.id - b.id);
}

/** When the drift alarm fires (see `driftAlarm`). */
export interface DriftRule {
  /** Steps (with data) each figure is averaged over. */
  window: number;
  /** The real environment's error rate below which the error-rate half never fires. */
  minRealErrorRate: number;
  /** "Well below": the rehearsed error rate is at most this share of the real one. */
  errorRatio: number;
  /** How much further the rehearsed reward must have pulled ahead of the real score than at the first evaluation. */
  rewardGap: number;
}

/** The studio's drift rule. */
export const DRIFT_RULE: DriftRule = { window: 3, minRealErrorRate: 0.1, errorRatio: 0.5, rewardGap: 0.2 };

/** The metric keys the drift alarm reads (each one the engine's catalogue declares). */
export const DRIFT_KEYS = {
  rehearsedErrorRate: "drift/rehearsed_error_rate",
  realErrorRate: "drift/real_error_rate",
  reward: "rl/reward",
  heldOutScore: "eval/generated_test/score",
} as const;

/** One half of the drift alarm. */
export interface DriftHalf {
  /** Whether it fires at its latest point. */
  on: boolean;
  /** First step of the latest period it fired in; null when it never fired. */
  since: number | null;
  /** Last step of that period once it has ended; null while it goes on (or never fired). */
  until: number | null;
  /** The step of its latest point. */
  step: number;
  /** At that point: the rehearsed figure (error rate, reward) and the real one (error rate, score). */
  rehearsed: number;
  real: number;
  /** Steps the rehearsed figure at that point is the mean of (up to the rule's window). */
  averaged: number;
  /** For the reward half: the gap at the first evaluation, which later gaps are measured from. */
  baseline?: number;
}

/** The drift alarm of a run: on when either half fires at its latest point. */
export interface DriftAlarm {
  on: boolean;
  /** The step the alarm started: the earliest `since` of the halves that are on. */
  since: number | null;
  /** The error-rate half; null without `drift/*` error rates (no call was replayed). */
  errorRate: DriftHalf | null;
  /** The reward half; null when not asked for or without rewards and held-out scores. */
  reward: DriftHalf | null;
}

/** The pairs `(step, a, b)` of the steps where both series have a finite value, ascending. */
function pairs(a: Series | undefined, b: Series | undefined): [number, number, number][] {
  if (!a || !b) return [];
  const bAt = new Map<number, number>();
  b.steps.forEach((step, i) => {
    const v = b.values[i];
    if (v !== null && Number.isFinite(v)) bAt.set(step, v);
  });
  const out: [number, number, number][] = [];
  a.steps.forEach((step, i) => {
    const v = a.values[i];
    const w = bAt.get(step);
    if (v !== null && Number.isFinite(v) && w !== undefined) out.push([step, v, w]);
  });
  return out.sort((x, y) => x[0] - y[0]);
}

/** A point of a half: step, rehearsed figure, real figure, whether it fires, steps averaged. */
type DriftPoint = [number, number, number, boolean, number];

/** A half from its points; null without points. */
function half(points: readonly DriftPoint[], baseline?: number): DriftHalf | null {
  if (points.length === 0) return null;
  let since: number | null = null;
  let until: number | null = null;
  for (let i = 0; i < points.length; i++) {
    const [step, , , fires] = points[i];
    if (fires && (i === 0 || !points[i - 1][3])) {
      since = step;
      until = null;
    }
    if (!fires && i > 0 && points[i - 1][3]) until = points[i - 1][0];
  }
  const [step, rehearsed, real, on, averaged] = points[points.length - 1];
  const out: DriftHalf = { on, since, until, step, rehearsed, real, averaged };
  if (baseline !== undefined) out.baseline = baseline;
  return out;
}

/**
 * The drift alarm of a run's metrics, on either of two signals, each a mean over the last
 * `rule.window` steps with data:
 *
 * - error rate: the share of rehearsed calls answered with an error by the simulator
 *   (`drift/rehearsed_error_rate`) falls to `rule.errorRatio` of the real environment's share
 *   on the same calls (`drift/real_error_rate`) or below, while the real share is at least
 *   `rule.minRealErrorRate`: the rehearsed world has become too easy;
 * - reward (when `rewardHalf`: runs whose rewards an LLM judge gives in a rehearsed world, as
 *   with the rule judge every reward is judged against real facts): at each held-out
 *   evaluation (`eval/generated_test/score`, acted on the real environment), the rehearsed
 *   training reward (`rl/reward`) leads that score by `rule.rewardGap` more than it did at the
 *   run's first evaluation.
 *
 * The error-rate half fires only on whole windows (its figures before are means over the
 * steps so far). Each half reports the first step of its latest firing period, and whether it
 * still fires.
 */
export function driftAlarm(store: { get(key: string): Series | undefined }, rewardHalf: boolean, rule: DriftRule = DRIFT_RULE): DriftAlarm {
  const w = Math.max(1, Math.floor(rule.window));
  const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const rates = pairs(store.get(DRIFT_KEYS.rehearsedErrorRate), store.get(DRIFT_KEYS.realErrorRate));
  const errorPoints: DriftPoint[] = [];
  for (let i = 0; i < rates.length; i++) {
    // Before a whole window the figures are means over the steps so far, and never fire.
    const last = rates.slice(Math.max(0, i + 1 - w), i + 1);
    const rehearsed = mean(last.map((p) => p[1]));
    const real = mean(last.map((p) => p[2]));
    errorPoints.push([rates[i][0], rehearsed, real, last.length === w && real >= rule.minRealErrorRate && rehearsed <= rule.errorRatio * real, last.length]);
  }
  const errorRate = half(errorPoints);
  let reward: DriftHalf | null = null;
  if (rewardHalf) {
    const rewards = store.get(DRIFT_KEYS.reward);
    const scores = store.get(DRIFT_KEYS.heldOutScore);
    const rewardAt: [number, number][] = [];
    rewards?.steps.forEach((step, i) => {
      const v = rewards.values[i];
      if (v !== null && Number.isFinite(v)) rewardAt.push([step, v]);
    });
    rewardAt.sort((a, b) => a[0] - b[0]);
    const points: DriftPoint[] = [];
    let baseline: number | undefined;
    scores?.steps.forEach((step, i) => {
      const score = scores.values[i];
      const recent = rewardAt.filter((p) => p[0] <= step).slice(-w);
      if (score === null || !Number.isFinite(score) || recent.length === 0) return;
      const rehearsed = mean(recent.map((p) => p[1]));
      const gap = rehearsed - score;
      baseline ??= gap;
      points.push([step, rehearsed, score, gap - baseline >= rule.rewardGap, recent.length]);
    });
    points.sort((a, b) => a[0] - b[0]);
    reward = half(points, baseline);
  }
  const on = [errorRate, reward].filter((h): h is DriftHalf => h !== null && h.on);
  return {
    on: on.length > 0,
    since: on.length > 0 ? Math.min(...on.map((h) => h.since ?? h.step)) : null,
    errorRate,
    reward,
  };
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

/** The fidelity scores a heatmap can show (`fidelity/<tool>/<score>` metric keys), value accuracy first. */
export const HEAT_SCORES: string[] = ((scores: readonly string[]) => ["value_accuracy", ...scores.filter((s) => s !== "value_accuracy")])(
  METRIC_CATALOGUE.parts.find((p) => p.name === "score")?.values ?? [],
);

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
