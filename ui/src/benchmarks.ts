// Benchmark scores of a run from the store's eval_results (a line chart per benchmark over the
// evaluated steps, one curve per category and metric with its stored standard error as a
// band, and bars of the latest values), and the per-tool × step heatmap of rehearsal fidelity
// drawn from the run's metrics.

import { commands, type EvalSeries, type StudioError } from "./bindings";
import { HEAT_SCORES, benchmarks, budgetCurves, evalCurve, heatColor, heatGrid, isBudgetCategory, isErrorMetric, latestBars, meanBand, type SeriesStore } from "./chartData";
import { ChartPanel } from "./charts";
import { h } from "./dom";

export class BenchmarkPanel {
  readonly element: HTMLElement;
  private readonly select = h("select", { id: "bench-select", "aria-label": "Benchmark" });
  private readonly chart: ChartPanel;
  private readonly budget: ChartPanel;
  private readonly budgetNote = h("div", { class: "chart-note", id: "budget-note" });
  private readonly bars = h("div", { id: "bench-bars", class: "bars" });
  private readonly note = h("div", { class: "chart-note" }, "No benchmark results yet.");
  private series: EvalSeries[] = [];
  private loading = false;

  constructor(private readonly onError: (error: StudioError) => void) {
    this.chart = new ChartPanel("bench", "Benchmark scores by step", (what, detail) => onError({ what, detail, file: null, field: null }));
    this.budget = new ChartPanel(
      "budget",
      "Test-time rehearsal: score vs imagined attempts",
      (what, detail) => onError({ what, detail, file: null, field: null }),
      "N",
    );
    this.select.addEventListener("change", () => this.draw());
    this.element = h(
      "section",
      { class: "wide-panel", id: "bench-panel" },
      h("div", { class: "chart-head" }, h("h3", {}, "Benchmarks"), h("label", {}, "Benchmark ", this.select)),
      this.note,
      h("div", { class: "bench-body" }, this.chart.element, h("div", { class: "chart" }, h("div", { class: "chart-head" }, h("h4", {}, "Latest values")), this.bars)),
      h("div", { class: "bench-body" }, h("div", {}, this.budget.element, this.budgetNote)),
    );
  }

  /** Forgets the shown run (a new job starts). */
  clear(): void {
    this.series = [];
    this.draw();
  }

  /** Loads `run`'s benchmark results from the store. */
  async load(run: number): Promise<void> {
    const result = await commands.runEvals(run);
    if (result.status === "error") return this.onError(result.error);
    this.series = result.data.series;
    this.draw();
  }

  /** Reloads `run` unless a load is still under way (a step event arrived meanwhile). */
  refresh(run: number): void {
    if (this.loading) return;
    this.loading = true;
    void this.load(run).finally(() => {
      this.loading = false;
    });
  }

  private draw(): void {
    const names = benchmarks(this.series);
    const chosen = names.includes(this.select.value) ? this.select.value : names[0] ?? "";
    this.select.replaceChildren(...names.map((name) => h("option", { value: name, selected: name === chosen }, name)));
    this.note.hidden = names.length > 0;
    const shown = this.series.filter(
      (s) => s.benchmark === chosen && !isBudgetCategory(s.category) && !isErrorMetric(s.metric),
    );
    // Each value ± its stored standard error (`<metric>_se`), drawn as a band.
    this.chart.setSeries(
      shown.map((s) => {
        const key = `${s.category}/${s.metric}`;
        const curve = evalCurve(this.series, chosen, s.category, s.metric);
        return curve ? meanBand(key, [curve], "se") : { key, steps: s.steps, values: s.values };
      }),
      shown.map((s) => `${s.category}/${s.metric}`),
    );
    const curves = budgetCurves(this.series, chosen);
    this.budget.setSeries((curves?.curves ?? []).map((c) => meanBand(c.key, [c], "se")));
    this.budgetNote.textContent = curves
      ? `After step ${curves.step}: each committed attempt follows N private imagined attempts, parallel (independent) or sequential (each sees the earlier ones); N = 0 is the plain evaluation.`
      : "No rehearsal-budget results: set [rehearsal].budget_curve to evaluate them after the last step.";
    const bars = latestBars(this.series, chosen);
    const top = Math.max(1, ...bars.map((b) => b.value));
    this.bars.dataset.bars = String(bars.length);
    this.bars.replaceChildren(
      ...bars.map((bar) =>
        h(
          "div",
          { class: "bar", title: `${chosen} ${bar.label} at step ${bar.step}` },
          h("span", { class: "bar-label" }, bar.label),
          h("span", { class: "bar-track" }, h("span", { class: "bar-fill", style: `width: ${Math.max(0, (100 * bar.value) / top).toFixed(1)}%` })),
          h("span", { class: "bar-value" }, `${Number(bar.value.toPrecision(4))} @${bar.step}`),
        ),
      ),
    );
  }
}

/** Cells drawn per step column at most: about one per 4 pixels. */
const CELL_PX = 4;

export class FidelityHeatmap {
  readonly element: HTMLElement;
  private readonly select = h("select", { id: "heatmap-score", "aria-label": "Fidelity score" });
  private readonly canvas = h("canvas", { id: "heatmap-canvas", class: "heatmap" });
  private readonly hover = h("div", { class: "chart-note", id: "heatmap-hover" });
  private readonly note = h("div", { class: "chart-note" }, "No per-tool fidelity yet (it comes with rehearsed or external answers).");
  private store: SeriesStore | null = null;
  private grid: ReturnType<typeof heatGrid> = { tools: [], steps: [], cells: [] };
  private labelWidth = 0;
  private cellWidth = 0;

  constructor() {
    for (const score of HEAT_SCORES) this.select.append(h("option", { value: score }, score));
    this.select.addEventListener("change", () => this.draw());
    this.canvas.addEventListener("mousemove", (event) => this.showCell(event));
    window.addEventListener("resize", () => this.draw());
    this.element = h(
      "section",
      { class: "wide-panel chart", id: "fidelity-heatmap", "data-tools": 0 },
      h("div", { class: "chart-head" }, h("h4", {}, "Fidelity per tool × step"), h("label", {}, "Score ", this.select)),
      this.note,
      this.canvas,
      this.hover,
    );
  }

  /** Redraws from `store` (the run's metrics). */
  update(store: SeriesStore): void {
    this.store = store;
    this.draw();
  }

  private draw(): void {
    if (!this.store) return;
    const width = Math.max(320, this.element.clientWidth - 16);
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.font = "11px 'DejaVu Sans Mono', monospace";
    const probe = heatGrid(this.store, this.select.value, 1);
    this.labelWidth = Math.min(220, Math.max(60, ...probe.tools.map((t) => ctx.measureText(t).width + 12)));
    this.grid = heatGrid(this.store, this.select.value, Math.floor((width - this.labelWidth) / CELL_PX));
    const { tools, steps, cells } = this.grid;
    this.element.dataset.tools = String(tools.length);
    this.element.dataset.steps = String(steps.length);
    this.note.hidden = tools.length > 0;
    this.canvas.hidden = tools.length === 0;
    if (tools.length === 0) return;
    const row = 18;
    const axis = 18;
    this.cellWidth = Math.max(1, Math.min(40, (width - this.labelWidth) / steps.length));
    const height = tools.length * row + axis;
    const scale = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(width * scale);
    this.canvas.height = Math.round(height * scale);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    ctx.setTransform(scale, 0, 0, scale, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px 'DejaVu Sans Mono', monospace";
    ctx.textBaseline = "middle";
    tools.forEach((tool, r) => {
      ctx.fillStyle = "#1d2327";
      ctx.fillText(tool, 2, r * row + row / 2, this.labelWidth - 8);
      cells[r].forEach((value, c) => {
        ctx.fillStyle = heatColor(value);
        ctx.fillRect(this.labelWidth + c * this.cellWidth, r * row + 1, Math.max(1, this.cellWidth - 1), row - 2);
      });
    });
    // Step labels under the first and last columns, and a few between.
    ctx.fillStyle = "#5b6770";
    const every = Math.max(1, Math.ceil(steps.length / Math.max(1, Math.floor((width - this.labelWidth) / 60))));
    for (let c = 0; c < steps.length; c += every) {
      ctx.fillText(String(steps[c]), this.labelWidth + c * this.cellWidth, tools.length * row + axis / 2);
    }
  }

  private showCell(event: MouseEvent): void {
    const rect = this.canvas.getBoundingClientRect();
    const c = Math.floor((event.clientX - rect.left - this.labelWidth) / this.cellWidth);
    const r = Math.floor((event.clientY - rect.top) / 18);
    const tool = this.grid.tools[r];
    const step = this.grid.steps[c];
    if (tool === undefined || step === undefined || c < 0) {
      this.hover.textContent = "";
      return;
    }
    const value = this.grid.cells[r][c];
    this.hover.textContent = `${tool} · step ${step}: ${this.select.value} ${value === null ? "–" : value.toFixed(3)}`;
  }
}
