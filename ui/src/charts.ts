// A chart panel on uPlot: several series over steps or wall time, each with an optional band
// around it (mean ± sd or standard error), an optional marked step, EMA smoothing, values under
// the cursor in the legend, drag to zoom (double-click or "Reset" to zoom out) with the zoomed
// range re-decimated from the full data, and PNG or SVG export through the host's save dialog.

import "./locale";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { commands } from "./bindings";
import { STEP_INCRS, TIME_INCRS, align, decimate, ema, flatRange, formatDuration, onAxis, type Aligned, type BandedSeries, type Series, type XAxis } from "./chartData";
import { chartSvg } from "./chartSvg";
import { h } from "./dom";

/** A "step / wall time" select that calls `onChange` with the axis picked. */
export function xAxisSelect(id: string, onChange: (axis: XAxis) => void): HTMLSelectElement {
  const select = h("select", { id, "aria-label": "X axis" }, h("option", { value: "step" }, "step"), h("option", { value: "time" }, "wall time"));
  select.addEventListener("change", () => onChange(select.value === "time" ? "time" : "step"));
  return select;
}

/** Every chart panel by id, for the console and the end-to-end tests (`window.__charts`). */
export const chartPanels = new Map<string, ChartPanel>();

const PALETTE = ["#1f6f5c", "#c2410c", "#2563eb", "#9333ea", "#b45309", "#0f766e", "#be123c", "#4d7c0f", "#475569", "#0369a1"];

/** Points per series handed to uPlot at most: about two per pixel column. */
const BUCKETS = 1000;

/** A palette colour with an alpha, for band fills. */
function translucent(color: string, alpha: string): string {
  return `${color}${alpha}`;
}

/** A band drawn around series `of`: its lower and upper edges, as indices into the panel's data rows. */
interface BandIndex {
  of: number;
  lower: number;
  upper: number;
}

export class ChartPanel {
  readonly element: HTMLElement;
  private readonly body = h("div", { class: "chart-body" });
  private readonly note = h("div", { class: "chart-note" });
  private plot: uPlot | null = null;
  private labels: string[] = [];
  private series: BandedSeries[] = [];
  /** The bands of the series drawn, as indices into the data rows (after the series). */
  private bands: BandIndex[] = [];
  /** A step marked by a vertical line (e.g. where an alarm started), or null. */
  private marker: number | null = null;
  private smoothing = 0;
  private raw: Aligned = [[]];
  private zoom: [number, number] | null = null;
  private settingData = false;
  private xAxis: XAxis = "step";

  constructor(
    readonly id: string,
    readonly title: string,
    private readonly onError: (what: string, detail: string) => void = () => {},
    private readonly xLabel = "step",
  ) {
    this.element = h(
      "section",
      { class: "chart", id: `chart-${id}`, "data-points": 0 },
      h(
        "div",
        { class: "chart-head" },
        h("h4", {}, title),
        h("button", { class: "chart-reset", title: "Zoom out to every step", onclick: () => this.resetZoom() }, "Reset zoom"),
        h("button", { class: "chart-export", title: "Save the chart as a PNG image", onclick: () => void this.exportPng() }, "PNG"),
        h("button", { class: "chart-export-svg", title: "Save the chart as an SVG (vector) image", onclick: () => void this.exportSvg() }, "SVG"),
      ),
      this.body,
      this.note,
    );
    // A panel's width follows the window's (the grid's columns are fractions of it).
    window.addEventListener("resize", () => this.fit());
    chartPanels.set(id, this);
    this.render();
  }

  /** Draws the series over steps or over wall time since the run's first metric. */
  setXAxis(axis: XAxis): void {
    if (axis === this.xAxis) return;
    this.xAxis = axis;
    this.zoom = null;
    this.element.dataset.zoom = "";
    this.element.dataset.xaxis = axis;
    this.destroy();
    this.render();
  }

  /** The label of the x axis as drawn. */
  private axisLabel(): string {
    return this.xAxis === "time" ? "wall time" : this.xLabel;
  }

  private formatX(v: number | null | undefined): string {
    if (v === null || v === undefined) return "–";
    return this.xAxis === "time" ? formatDuration(v) : String(v);
  }

  /**
   * Replaces the series drawn, labelled by `labels` (default: their keys). A series with
   * `lower` and `upper` bounds is drawn with a shaded band between them; the legend shows its
   * value as `mean ± half-width`.
   */
  setSeries(series: BandedSeries[], labels?: string[]): void {
    this.series = series;
    const next = labels ?? series.map((s) => s.key);
    const bands: BandIndex[] = [];
    series.forEach((s, i) => {
      if (s.lower && s.upper) bands.push({ of: i, lower: series.length + 2 * bands.length, upper: series.length + 2 * bands.length + 1 });
    });
    const changed =
      next.length !== this.labels.length || next.some((l, i) => l !== this.labels[i]) || bands.length !== this.bands.length || bands.some((b, i) => b.of !== this.bands[i].of);
    this.labels = next;
    this.bands = bands;
    this.element.dataset.bands = String(bands.length);
    if (changed) this.destroy();
    this.render();
  }

  /** Marks step `x` with a vertical line (null: none), e.g. where an alarm started. */
  setMarker(x: number | null): void {
    this.marker = x;
    this.element.dataset.marker = x === null ? "" : String(x);
    this.plot?.redraw(false);
  }

  /** Sets the EMA weight (0 = raw values). */
  setSmoothing(weight: number): void {
    this.smoothing = weight;
    this.render();
  }

  /** Non-null points drawn (before decimation). */
  points(): number {
    let n = 0;
    for (const s of this.series) for (const v of s.values) if (v !== null) n++;
    return n;
  }

  private render(): void {
    const points = this.points();
    this.element.dataset.points = String(points);
    if (this.series.length === 0 || points === 0) {
      this.destroy();
      this.note.textContent = "No data yet.";
      return;
    }
    const drawn = onAxis(this.series, this.xAxis);
    if (drawn.every((s) => s.steps.length === 0)) {
      this.destroy();
      this.note.textContent = "No wall times were recorded for these curves.";
      return;
    }
    this.note.textContent = "";
    // Band edges travel as extra rows after the series, through the same axis, smoothing,
    // alignment and decimation.
    const edges: Series[] = this.bands.flatMap((b) => {
      const s = this.series[b.of];
      return [
        { key: `${s.key} lower`, steps: s.steps, values: s.lower ?? [], times: s.times },
        { key: `${s.key} upper`, steps: s.steps, values: s.upper ?? [], times: s.times },
      ];
    });
    if (edges.length > 0) drawn.push(...onAxis(edges, this.xAxis));
    const smoothed = drawn.map((s) => ({ ...s, values: ema(s.values, this.smoothing) }));
    this.raw = align(smoothed);
    const shown = this.zoom ? decimate(this.raw, BUCKETS, this.zoom[0], this.zoom[1]) : decimate(this.raw, BUCKETS);
    if (!this.plot) {
      this.create(shown);
    } else {
      this.fit();
      this.settingData = true;
      this.plot.setData(shown as uPlot.AlignedData, this.zoom === null);
      this.settingData = false;
    }
  }

  private size(): { width: number; height: number } {
    return { width: Math.max(280, this.body.clientWidth || 420), height: 220 };
  }

  /** The legend's value of series `i` at data row `idx`: with its band, `mean ± half-width`. */
  private legendValue(u: uPlot, i: number, v: number | null, idx: number | null): string {
    if (v === null || v === undefined) return "–";
    const text = Number(v.toPrecision(4)).toString();
    const band = this.bands.find((b) => b.of === i);
    if (!band || idx === null) return text;
    const upper = u.data[band.upper + 1]?.[idx];
    if (upper === null || upper === undefined) return text;
    return `${text} ± ${Number(Math.abs(upper - v).toPrecision(2))}`;
  }

  private create(data: Aligned): void {
    const panel = this;
    const options: uPlot.Options = {
      ...this.size(),
      scales: {
        x: { time: false },
        y: {
          range: (_u: uPlot, min: number, max: number) => {
            const [lo, hi] = flatRange(min, max);
            return uPlot.rangeNum(lo, hi, 0.1, true);
          },
        },
      },
      series: [
        { label: this.axisLabel(), value: (_u, v) => this.formatX(v) },
        ...this.labels.map((label, i) => ({
          label,
          stroke: PALETTE[i % PALETTE.length],
          width: 1.5,
          // Every other curve dashed, so that curves lying on each other (two runs with the
          // same early steps) both stay visible.
          dash: i % 2 === 1 ? [6, 4] : undefined,
          spanGaps: true,
          points: { show: (u: uPlot) => (u.data[0]?.length ?? 0) < 60 },
          value: (u: uPlot, v: number | null, _s: number, idx: number | null) => this.legendValue(u, i, v, idx),
        })),
        ...this.bands.flatMap((b) =>
          (["lower", "upper"] as const).map((edge) => ({
            label: `${this.labels[b.of]} (${edge})`,
            stroke: translucent(PALETTE[b.of % PALETTE.length], "55"),
            width: 0.5,
            spanGaps: false,
            points: { show: false },
          })),
        ),
      ],
      bands: this.bands.map((b) => ({ series: [b.upper + 1, b.lower + 1] as [number, number], fill: translucent(PALETTE[b.of % PALETTE.length], "2e") })),
      axes: [
        this.xAxis === "time"
          ? { label: this.axisLabel(), size: 36, incrs: TIME_INCRS, values: (_u: uPlot, splits: number[]) => splits.map((v) => formatDuration(v)) }
          : { label: this.axisLabel(), size: 36, incrs: STEP_INCRS },
        { size: 56 },
      ],
      cursor: {
        drag: { x: true, y: false, setScale: true },
        bind: { dblclick: () => () => null },
      },
      legend: { live: true },
      hooks: {
        draw: [(u: uPlot) => panel.drawMarker(u)],
        setScale: [
          (u: uPlot, key: string) => {
            if (key !== "x" || panel.settingData) return;
            const min = u.scales.x.min;
            const max = u.scales.x.max;
            if (min === undefined || max === undefined || min === null || max === null) return;
            panel.zoomTo(min, max);
          },
        ],
      },
    };
    this.plot = new uPlot(options, data as uPlot.AlignedData, this.body);
    this.plot.over.addEventListener("dblclick", () => this.resetZoom());
    // Band edges stay out of the legend: the band's series shows `mean ± half-width`.
    const rows = this.plot.root.querySelectorAll(".u-legend .u-series");
    for (let i = this.labels.length + 1; i < rows.length; i++) rows[i].classList.add("u-band-edge");
  }

  /** Draws the marked step as a dashed vertical line across the plot. */
  private drawMarker(u: uPlot): void {
    if (this.marker === null || this.xAxis !== "step") return;
    const x = u.valToPos(this.marker, "x", true);
    if (!Number.isFinite(x) || x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "#b42318";
    ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.restore();
  }

  /** Shows steps `[min, max]`, re-decimated from the full data. */
  private zoomTo(min: number, max: number): void {
    const xs = this.raw[0];
    if (xs.length === 0) return;
    const whole = min <= xs[0] && max >= xs[xs.length - 1];
    this.zoom = whole ? null : [min, max];
    if (!this.plot) return;
    this.settingData = true;
    this.plot.setData((this.zoom ? decimate(this.raw, BUCKETS, min, max) : decimate(this.raw, BUCKETS)) as uPlot.AlignedData, false);
    this.settingData = false;
    this.element.dataset.zoom = this.zoom ? `${min}-${max}` : "";
  }

  /** Shows steps `[min, max]` as dragging over that range does: the range is re-decimated. */
  zoomX(min: number, max: number): void {
    this.plot?.setScale("x", { min, max });
  }

  resetZoom(): void {
    this.zoom = null;
    this.element.dataset.zoom = "";
    if (!this.plot) return;
    this.settingData = true;
    this.plot.setData(decimate(this.raw, BUCKETS) as uPlot.AlignedData, true);
    this.settingData = false;
  }

  private fit(): void {
    if (this.plot && this.body.clientWidth > 0) {
      const { width, height } = this.size();
      if (Math.abs(this.plot.width - width) > 2) this.plot.setSize({ width, height });
    }
  }

  private destroy(): void {
    this.plot?.destroy();
    this.plot = null;
    this.body.replaceChildren();
  }

  /** The chart as a PNG (base64, no data-URL prefix), title and legend drawn in. */
  pngBase64(): string | null {
    if (!this.plot) return null;
    const source = this.plot.ctx.canvas;
    const legendRows = this.labels.length;
    const out = document.createElement("canvas");
    out.width = source.width;
    out.height = source.height + 28 + 18 * legendRows;
    const ctx = out.getContext("2d");
    if (!ctx) return null;
    ctx.fillStyle = "white";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.fillStyle = "#1d2327";
    ctx.font = "bold 14px 'DejaVu Sans', sans-serif";
    ctx.fillText(this.title, 8, 18);
    ctx.drawImage(source, 0, 24);
    ctx.font = "12px 'DejaVu Sans', sans-serif";
    this.labels.forEach((label, i) => {
      const y = 24 + source.height + 16 + 18 * i;
      ctx.fillStyle = PALETTE[i % PALETTE.length];
      ctx.fillRect(8, y - 9, 14, 4);
      ctx.fillStyle = "#1d2327";
      ctx.fillText(label, 28, y - 4);
    });
    return out.toDataURL("image/png").replace(/^data:image\/png;base64,/, "");
  }

  /** The chart as drawn now (zoom included) as an SVG document, or `null` before any data. */
  svgText(): string | null {
    const plot = this.plot;
    if (!plot) return null;
    const { min: x0, max: x1 } = plot.scales.x;
    const { min: y0, max: y1 } = plot.scales.y;
    if (x0 == null || x1 == null || y0 == null || y1 == null) return null;
    return chartSvg({
      title: this.title,
      xLabel: this.axisLabel(),
      labels: this.labels,
      colors: this.labels.map((_, i) => PALETTE[i % PALETTE.length]),
      dashed: this.labels.map((_, i) => i % 2 === 1),
      bands: this.bands.map((b) => ({ lower: b.lower + 1, upper: b.upper + 1, color: PALETTE[b.of % PALETTE.length] })),
      marker: this.xAxis === "step" ? this.marker : null,
      data: plot.data as unknown as Aligned,
      x: [x0, x1],
      y: [y0, y1],
      width: plot.bbox.width / devicePixelRatio,
      height: plot.bbox.height / devicePixelRatio,
      formatX: (v) => this.formatX(v),
      formatY: (v) => Number(v.toPrecision(4)).toString(),
    });
  }

  /** Asks where to save the SVG (the host's dialog), or writes `path` when given. */
  exportSvg(path: string | null = null): Promise<string | null> {
    return this.export(this.svgText(), (svg) => commands.saveSvg(svg, this.id, path));
  }

  /** Asks where to save the PNG (the host's dialog), or writes `path` when given. */
  exportPng(path: string | null = null): Promise<string | null> {
    return this.export(this.pngBase64(), (png) => commands.savePng(png, this.id, path));
  }

  /** Hands the drawn chart to the host's save command; reports a chart with no data or a failure. */
  private async export(drawn: string | null, save: (drawn: string) => ReturnType<typeof commands.savePng>): Promise<string | null> {
    if (!drawn) {
      this.onError("Cannot save the chart", `${this.title} has no data to draw yet`);
      return null;
    }
    const result = await save(drawn);
    if (result.status === "error") {
      this.onError(result.error.what, result.error.detail);
      return null;
    }
    return result.data;
  }
}
