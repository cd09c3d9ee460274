// The page side of `cargo xtask bench chart`: not part of the studio's bundle. Built on its own
// (`npm run build:bench`, one IIFE file) and injected by WebDriver into the running studio's
// webview, where it draws a chart of N points per series either through our path (ChartPanel:
// alignment, min/max decimation, uPlot on the decimated data) or, as the peer, with plain uPlot
// given every raw point, and times the first draw and a sweep of zoom/pan windows with
// performance.now(). The driver polls `window.__chartBench.status()` for the figures.

import "../locale";
import { ChartPanel } from "../charts";
import type { Series } from "../chartData";
import uPlot from "uplot";

export type Side = "ours" | "peer";

export interface BenchOptions {
  side: Side;
  /** Points per series. */
  points: number;
  series: number;
  /** Zoom windows per sweep, from the whole range down to `minFraction` of it. */
  windows: number;
  minFraction: number;
  /** Sweeps over the windows; every redraw of every sweep is one sample. */
  rounds: number;
}

export interface Stats {
  median: number;
  p95: number;
  min: number;
  max: number;
  samples: number;
  /** Every sample in the order measured (the redraws only). */
  all?: number[];
}

export interface BenchResult {
  side: Side;
  points_per_series: number;
  series: number;
  /** The chart's drawing area in CSS pixels. */
  plot_px: [number, number];
  /** From creating the chart until the frame that shows it has been painted. */
  first_draw_ms: number;
  /** From creating the chart until its script work (canvas drawing included) is done. */
  first_draw_script_ms: number;
  /** Per zoom/pan: from setting the x range until the frame showing it has been painted. */
  redraw_ms: Stats;
  /** Per zoom/pan: until the script work (re-decimation, canvas drawing) is done. */
  redraw_script_ms: Stats;
  /** The zoom windows of one sweep, as fractions of the whole range. */
  window_fractions: number[];
  /** Generating the data (not part of either side's figures). */
  data_ms: number;
  /** `performance.memory.usedJSHeapSize` where the engine exposes it (WebKit does not). */
  js_heap_bytes: number | null;
}

interface Status {
  state: "idle" | "running" | "done" | "failed";
  phase: string;
  result: BenchResult | null;
  error: string | null;
}

declare global {
  interface Window {
    __chartBench?: { start: (options: BenchOptions) => void; status: () => Status };
  }
}

const PALETTE = ["#1f6f5c", "#c2410c", "#2563eb", "#9333ea", "#b45309"];

/** A small deterministic generator (xorshift32), so both sides draw the same curves. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

/** Steps 0..n-1 and `k` noisy curves (a random walk, a slow wave, rare spikes) over them. */
function makeData(n: number, k: number): { xs: number[]; ys: number[][] } {
  const xs: number[] = new Array(n);
  for (let i = 0; i < n; i++) xs[i] = i;
  const ys: number[][] = [];
  for (let s = 0; s < k; s++) {
    const next = rng(0x9e3779b9 + s * 7919);
    const y: number[] = new Array(n);
    let walk = 0;
    const period = n / (3 + 2 * s);
    for (let i = 0; i < n; i++) {
      walk += (next() - 0.5) * 0.02;
      const spike = next() < 1e-4 ? (next() - 0.5) * 4 : 0;
      y[i] = s + Math.sin((2 * Math.PI * i) / period) + walk + 0.2 * (next() - 0.5) + spike;
    }
    ys.push(y);
  }
  return { xs, ys };
}

/** Resolves with the time once the next frame has been painted. */
function afterPaint(): Promise<number> {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0)));
}

/**
 * Runs `action` and returns (script ms, painted ms) from just before it: until the microtasks
 * it queued have run (uPlot draws in one), and until the next frame has been painted.
 */
async function timed(action: () => void): Promise<[number, number]> {
  const t0 = performance.now();
  action();
  const painted = afterPaint();
  for (let i = 0; i < 8; i++) await Promise.resolve();
  const script = performance.now();
  return [script - t0, (await painted) - t0];
}

function stats(samples: number[], keepAll = false): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
  const round = (v: number) => Math.round(v * 100) / 100;
  const out: Stats = {
    median: round(rank(0.5)),
    p95: round(rank(0.95)),
    min: round(sorted[0]),
    max: round(sorted[sorted.length - 1]),
    samples: sorted.length,
  };
  if (keepAll) out.all = samples.map(round);
  return out;
}

/** The zoom windows of one sweep: fractions from 1 down to `minFraction`, geometrically. */
function fractions(windows: number, minFraction: number): number[] {
  const out: number[] = [];
  for (let k = 0; k < windows; k++) out.push(windows === 1 ? 1 : Math.pow(minFraction, k / (windows - 1)));
  return out;
}

/** The k-th window over `[0, last]`: its width, moved around the range so each step also pans. */
function windowAt(k: number, fraction: number, last: number): [number, number] {
  const width = fraction * last;
  const where = 0.5 + 0.4 * Math.sin(1.3 * k);
  const min = (last - width) * where;
  return [min, min + width];
}

function jsHeap(): number | null {
  const memory = (performance as unknown as { memory?: { usedJSHeapSize?: number } }).memory;
  return typeof memory?.usedJSHeapSize === "number" ? memory.usedJSHeapSize : null;
}

/** A chart-sized frame over the studio's page, styled like a chart of the training view. */
function frame(): { section: HTMLElement; body: HTMLElement } {
  const host = document.createElement("div");
  host.id = "chart-bench";
  host.style.cssText = "position: fixed; left: 0; top: 0; width: 1200px; padding: 8px; background: white; z-index: 10000";
  const section = document.createElement("section");
  section.className = "chart";
  const body = document.createElement("div");
  body.className = "chart-body";
  host.append(section);
  document.body.append(host);
  return { section, body };
}

interface Chart {
  create: () => void;
  zoom: (min: number, max: number) => void;
  size: () => [number, number];
}

/** Our path: the studio's chart panel, given the series as the training view gives them. */
function ours(xs: number[], ys: number[][]): Chart {
  const { section } = frame();
  let panel: ChartPanel | null = null;
  return {
    create: () => {
      panel = new ChartPanel("bench", "Benchmark");
      section.replaceWith(panel.element);
      const series: Series[] = ys.map((values, i) => ({ key: `series ${i + 1}`, steps: xs, values }));
      panel.setSeries(series);
    },
    zoom: (min, max) => panel?.zoomX(min, max),
    size: () => {
      const canvas = panel?.element.querySelector("canvas");
      return canvas ? [canvas.clientWidth, canvas.clientHeight] : [0, 0];
    },
  };
}

/** The peer: plain uPlot with every raw point, drawn with the same size and strokes. */
function peer(xs: number[], ys: number[][]): Chart {
  const { section, body } = frame();
  let plot: uPlot | null = null;
  return {
    create: () => {
      section.append(body);
      const options: uPlot.Options = {
        width: Math.max(280, body.clientWidth || 420),
        height: 220,
        scales: { x: { time: false } },
        series: [
          { label: "step" },
          ...ys.map((_, i) => ({
            label: `series ${i + 1}`,
            stroke: PALETTE[i % PALETTE.length],
            width: 1.5,
            dash: i % 2 === 1 ? [6, 4] : undefined,
          })),
        ],
        cursor: { drag: { x: true, y: false, setScale: true } },
      };
      plot = new uPlot(options, [xs, ...ys] as uPlot.AlignedData, body);
    },
    zoom: (min, max) => plot?.setScale("x", { min, max }),
    size: () => {
      const canvas = body.querySelector("canvas");
      return canvas ? [canvas.clientWidth, canvas.clientHeight] : [0, 0];
    },
  };
}

async function run(options: BenchOptions, status: Status): Promise<BenchResult> {
  status.phase = "data";
  const d0 = performance.now();
  const { xs, ys } = makeData(options.points, options.series);
  const dataMs = performance.now() - d0;
  const chart = options.side === "ours" ? ours(xs, ys) : peer(xs, ys);
  await afterPaint();

  status.phase = "first draw";
  const [firstScript, firstPainted] = await timed(chart.create);
  await afterPaint();

  status.phase = "zoom";
  const windows = fractions(options.windows, options.minFraction);
  const last = xs[xs.length - 1];
  const script: number[] = [];
  const painted: number[] = [];
  for (let round = 0; round < options.rounds; round++) {
    for (let k = 0; k < windows.length; k++) {
      const [min, max] = windowAt(k, windows[k], last);
      const [s, p] = await timed(() => chart.zoom(min, max));
      script.push(s);
      painted.push(p);
      // One frame between windows, so that each redraw starts from a settled page.
      await afterPaint();
    }
  }
  return {
    side: options.side,
    points_per_series: options.points,
    series: options.series,
    plot_px: chart.size(),
    first_draw_ms: Math.round(firstPainted * 100) / 100,
    first_draw_script_ms: Math.round(firstScript * 100) / 100,
    redraw_ms: stats(painted, true),
    redraw_script_ms: stats(script),
    window_fractions: windows.map((f) => Number(f.toPrecision(3))),
    data_ms: Math.round(dataMs),
    js_heap_bytes: jsHeap(),
  };
}

const status: Status = { state: "idle", phase: "", result: null, error: null };

window.__chartBench = {
  start(options: BenchOptions): void {
    if (status.state === "running") return;
    Object.assign(status, { state: "running", phase: "", result: null, error: null });
    run(options, status).then(
      (result) => Object.assign(status, { state: "done", phase: "", result }),
      (err: unknown) => Object.assign(status, { state: "failed", error: err instanceof Error ? `${err.message}\n${err.stack ?? ""}` : String(err) }),
    );
  },
  status: () => ({ ...status }),
};
