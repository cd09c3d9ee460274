// Charts as standalone SVG documents, pure and DOM-free: the data a chart panel shows, drawn
// as lines over round-number axes with its title and legend, for vector export.

import type { Aligned } from "./chartData";

/** What one SVG chart draws. */
export interface SvgChart {
  title: string;
  xLabel: string;
  /** One label, colour and dash flag per series (`data[1..]`). */
  labels: string[];
  colors: string[];
  dashed: boolean[];
  /**
   * Shaded bands: the data rows (indices into `data`) of each band's lower and upper edge,
   * and the colour of the series it surrounds.
   */
  bands?: { lower: number; upper: number; color: string }[];
  /** An x value marked by a dashed vertical line, or null. */
  marker?: number | null;
  /** `[xs, ys1, ys2, …]`, as the panel shows it (already decimated); band edges follow the series. */
  data: Aligned;
  /** The x and y ranges shown. */
  x: [number, number];
  y: [number, number];
  /** Size of the plot area in pixels. */
  width: number;
  height: number;
  formatX: (value: number) => string;
  formatY: (value: number) => string;
}

/** Ticks at round values (1, 2 or 5 × 10^k apart) inside `[min, max]`, at most about `count`. */
export function niceTicks(min: number, max: number, count: number): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (!(max > min)) return [min];
  const raw = (max - min) / Math.max(1, count);
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? 10 * magnitude;
  const ticks: number[] = [];
  for (let i = Math.ceil(min / step); i * step <= max + step * 1e-9; i++) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/** `text` with the characters XML gives meaning to escaped. */
export function escapeXml(text: string): string {
  return text.replace(/[<>&'"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", "'": "&apos;", '"': "&quot;" })[c] ?? c);
}

const FONT = "font-family=\"'DejaVu Sans', sans-serif\"";
const INK = "#1d2327";
const GRID = "#e3e6e8";

/** Rounds a pixel coordinate to 0.01 so the document stays small. */
function px(v: number): string {
  return String(Math.round(v * 100) / 100);
}

/** The chart as an SVG document: axes with ticks and labels, one line per series, a legend. */
export function chartSvg(chart: SvgChart): string {
  const left = 64;
  const top = 32;
  const plotW = Math.max(40, chart.width);
  const plotH = Math.max(40, chart.height);
  const legendTop = top + plotH + 44;
  const width = left + plotW + 16;
  const height = legendTop + 18 * chart.labels.length + 8;
  const [x0, x1] = chart.x;
  const [y0, y1] = chart.y;
  const sx = (v: number) => left + (x1 > x0 ? ((v - x0) / (x1 - x0)) * plotW : plotW / 2);
  const sy = (v: number) => top + plotH - (y1 > y0 ? ((v - y0) / (y1 - y0)) * plotH : plotH / 2);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="8" y="20" ${FONT} font-size="14" font-weight="bold" fill="${INK}">${escapeXml(chart.title)}</text>`);
  out.push(`<clipPath id="plot-area"><rect x="${left}" y="${top}" width="${plotW}" height="${plotH}"/></clipPath>`);
  for (const t of niceTicks(y0, y1, Math.max(2, Math.floor(plotH / 40)))) {
    const y = px(sy(t));
    out.push(`<line x1="${left}" x2="${left + plotW}" y1="${y}" y2="${y}" stroke="${GRID}"/>`);
    out.push(`<text x="${left - 6}" y="${y}" ${FONT} font-size="11" fill="${INK}" text-anchor="end" dominant-baseline="middle">${escapeXml(chart.formatY(t))}</text>`);
  }
  for (const t of niceTicks(x0, x1, Math.max(2, Math.floor(plotW / 90)))) {
    const x = px(sx(t));
    out.push(`<line x1="${x}" x2="${x}" y1="${top}" y2="${top + plotH}" stroke="${GRID}"/>`);
    out.push(`<text x="${x}" y="${top + plotH + 16}" ${FONT} font-size="11" fill="${INK}" text-anchor="middle">${escapeXml(chart.formatX(t))}</text>`);
  }
  out.push(`<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="none" stroke="${INK}" stroke-width="0.8"/>`);
  out.push(`<text x="${left + plotW / 2}" y="${top + plotH + 34}" ${FONT} font-size="12" fill="${INK}" text-anchor="middle">${escapeXml(chart.xLabel)}</text>`);
  const xs = chart.data[0];
  for (const band of chart.bands ?? []) {
    const lo = (chart.data[band.lower] ?? []) as (number | null)[];
    const hi = (chart.data[band.upper] ?? []) as (number | null)[];
    // One polygon per run of points where both edges have values: along the upper edge,
    // back along the lower one.
    let run: number[] = [];
    const flush = () => {
      if (run.length > 1) {
        const top = run.map((j, k) => `${k === 0 ? "M" : "L"}${px(sx(xs[j]))} ${px(sy(hi[j] as number))}`);
        const bottom = [...run].reverse().map((j) => `L${px(sx(xs[j]))} ${px(sy(lo[j] as number))}`);
        out.push(`<path class="band" d="${top.join("")}${bottom.join("")}Z" fill="${band.color}" fill-opacity="0.18" stroke="none" clip-path="url(#plot-area)"/>`);
      }
      run = [];
    };
    for (let j = 0; j < xs.length; j++) {
      const a = lo[j];
      const b = hi[j];
      if (a === null || b === null || a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || !Number.isFinite(xs[j])) flush();
      else run.push(j);
    }
    flush();
  }
  if (chart.marker !== null && chart.marker !== undefined && chart.marker >= x0 && chart.marker <= x1) {
    const x = px(sx(chart.marker));
    out.push(`<line class="marker" x1="${x}" x2="${x}" y1="${top}" y2="${top + plotH}" stroke="#b42318" stroke-width="1.5" stroke-dasharray="5 4"/>`);
  }
  chart.labels.forEach((label, i) => {
    const ys = (chart.data[i + 1] ?? []) as (number | null)[];
    const color = chart.colors[i] ?? INK;
    const dash = chart.dashed[i] ? ' stroke-dasharray="6 4"' : "";
    const points: string[] = [];
    for (let j = 0; j < xs.length; j++) {
      const v = ys[j];
      if (v === null || v === undefined || !Number.isFinite(v) || !Number.isFinite(xs[j])) continue;
      points.push(`${points.length === 0 ? "M" : "L"}${px(sx(xs[j]))} ${px(sy(v))}`);
    }
    if (points.length === 1) {
      const [x, y] = points[0].slice(1).split(" ");
      out.push(`<circle class="series" cx="${x}" cy="${y}" r="2.5" fill="${color}" clip-path="url(#plot-area)"/>`);
    } else if (points.length > 1) {
      out.push(`<path class="series" d="${points.join("")}" fill="none" stroke="${color}" stroke-width="1.5"${dash} clip-path="url(#plot-area)"/>`);
    }
    const y = legendTop + 18 * i;
    out.push(`<line x1="8" x2="24" y1="${y - 4}" y2="${y - 4}" stroke="${color}" stroke-width="3"${dash}/>`);
    out.push(`<text x="30" y="${y}" ${FONT} font-size="12" fill="${INK}">${escapeXml(label)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n");
}
