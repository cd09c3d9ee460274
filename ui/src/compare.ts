// Run comparison: pick runs, overlay one metric's curves, a table of each run's final metric
// values, and the config diff between two runs (the same diff view as the editor's).

import { commands, type RunInfo, type StudioError } from "./bindings";
import { SeriesStore, formatValue, lastValue, type Series } from "./chartData";
import { ChartPanel, xAxisSelect } from "./charts";
import { renderDiff } from "./diffView";
import { h } from "./dom";

interface Loaded {
  run: RunInfo;
  store: SeriesStore;
}

export class CompareView {
  private readonly runList = h("div", { id: "compare-runs", class: "compare-runs" });
  private readonly metricSelect = h("select", { id: "compare-metric", "aria-label": "Metric" });
  private readonly xAxis = xAxisSelect("compare-xaxis", (axis) => this.chart.setXAxis(axis));
  private readonly chart = new ChartPanel("compare", "Metric by run", (what, detail) => this.showError({ what, detail, file: null, field: null }));
  private readonly table = h("table", { id: "compare-table", class: "data-table" });
  private readonly leftSelect = h("select", { id: "compare-left", "aria-label": "Left run" });
  private readonly rightSelect = h("select", { id: "compare-right", "aria-label": "Right run" });
  private readonly diff = h("pre", { id: "compare-diff", class: "diff" });
  private readonly message = h("div", { class: "message" });
  private runs: RunInfo[] = [];
  private loaded = new Map<number, Loaded>();

  constructor(root: HTMLElement) {
    this.metricSelect.addEventListener("change", () => this.drawChart());
    root.replaceChildren(
      this.message,
      h(
        "div",
        { class: "compare-body" },
        h("div", { class: "compare-side" }, h("h3", {}, "Runs"), this.runList, h("button", { id: "compare-button", class: "primary", onclick: () => void this.compare() }, "Compare")),
        h(
          "div",
          { class: "compare-main" },
          h(
            "div",
            { class: "toolbar" },
            h("label", {}, "Metric ", this.metricSelect),
            h("label", { title: "Overlay the runs over training steps or over wall time since each run's first step" }, "X axis ", this.xAxis),
          ),
          this.chart.element,
          h("h3", {}, "Final values"),
          h("div", { class: "table-scroll" }, this.table),
          h("h3", {}, "Config diff"),
          h(
            "div",
            { class: "toolbar" },
            this.leftSelect,
            " → ",
            this.rightSelect,
            h("button", { id: "compare-diff-button", onclick: () => void this.showDiff() }, "Diff configs"),
          ),
          this.diff,
        ),
      ),
    );
  }

  /** Refreshes the run list, keeping the runs ticked. */
  async show(): Promise<void> {
    const result = await commands.listRuns();
    if (result.status === "error") return this.showError(result.error);
    const ticked = new Set(this.ticked());
    this.runs = result.data;
    this.runList.replaceChildren(
      ...this.runs.map((run) =>
        h(
          "label",
          { class: "run-pick" },
          h("input", { type: "checkbox", value: run.id, checked: ticked.has(run.id) }),
          ` ${run.id} · ${run.name} (${run.status}, step ${run.last_step ?? "–"})`,
        ),
      ),
    );
    const options = () => this.runs.map((run) => h("option", { value: run.id }, `${run.id} · ${run.name}`));
    const [left, right] = [this.leftSelect.value, this.rightSelect.value];
    this.leftSelect.replaceChildren(...options());
    this.rightSelect.replaceChildren(...options());
    if (this.runs.length > 1) {
      this.leftSelect.value = left || String(this.runs[1].id);
      this.rightSelect.value = right || String(this.runs[0].id);
    }
  }

  private ticked(): number[] {
    return [...this.runList.querySelectorAll<HTMLInputElement>("input[type=checkbox]")].filter((c) => c.checked).map((c) => Number(c.value));
  }

  /** Loads the ticked runs' metrics, then draws the chart and the table. */
  private async compare(): Promise<void> {
    const ids = this.ticked();
    if (ids.length === 0) return this.showError({ what: "Nothing to compare", detail: "tick one or more runs", file: null, field: null });
    this.message.replaceChildren();
    this.loaded = new Map();
    for (const id of ids) {
      const result = await commands.runMetrics(id);
      if (result.status === "error") return this.showError(result.error);
      const run = this.runs.find((r) => r.id === id);
      if (run) this.loaded.set(id, { run, store: new SeriesStore(result.data.series) });
    }
    const keys = [...new Set([...this.loaded.values()].flatMap((l) => l.store.keys()))].sort();
    const previous = this.metricSelect.value;
    this.metricSelect.replaceChildren(...keys.map((k) => h("option", { value: k }, k)));
    this.metricSelect.value = keys.includes(previous) ? previous : keys.includes("sft/loss") ? "sft/loss" : (keys[0] ?? "");
    this.drawChart();
    this.drawTable(keys);
    if (ids.length >= 2) {
      this.leftSelect.value = String(ids[1]);
      this.rightSelect.value = String(ids[0]);
    }
  }

  private drawChart(): void {
    const key = this.metricSelect.value;
    const series: Series[] = [];
    const labels: string[] = [];
    for (const { run, store } of this.loaded.values()) {
      const s = store.get(key);
      if (!s) continue;
      series.push(s);
      labels.push(`run ${run.id} · ${run.name}`);
    }
    this.chart.setSeries(series, labels);
  }

  private drawTable(keys: string[]): void {
    const loaded = [...this.loaded.values()];
    this.table.replaceChildren(
      h("tr", {}, h("th", {}, "metric"), ...loaded.map((l) => h("th", {}, `run ${l.run.id} · ${l.run.name}`))),
      ...keys.map((key) =>
        h(
          "tr",
          { "data-key": key },
          h("td", {}, h("code", {}, key)),
          ...loaded.map((l) => {
            const last = lastValue(l.store.get(key));
            return h("td", { title: last ? `step ${last.step}` : "" }, last ? formatValue(last.value) : "–");
          }),
        ),
      ),
    );
  }

  private async showDiff(): Promise<void> {
    const left = Number(this.leftSelect.value);
    const right = Number(this.rightSelect.value);
    const result = await commands.diffRuns(left, right);
    if (result.status === "error") return this.showError(result.error);
    this.diff.replaceChildren(...renderDiff(result.data, `Changes from run ${left} to run ${right}:`, `Runs ${left} and ${right} have the same config.`));
  }

  private showError(error: StudioError): void {
    const where = [error.file, error.field].filter(Boolean).join(", ");
    this.message.replaceChildren(h("div", { class: "message error" }, `${error.what}: ${error.detail}${where ? ` (${where})` : ""}`));
  }
}
