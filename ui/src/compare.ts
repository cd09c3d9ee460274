// Run comparison: pick runs, overlay one metric's curves, a table of each run's final metric
// values, and the config diff between two runs (the same diff view as the editor's). Runs that
// differ only in seed (the host groups them into arms by their configs) are drawn per arm as
// the mean with a band (± sd or ± standard error over the seeds) — for metrics, benchmark
// values over steps, and pass@k and rehearsal-budget curves at a chosen checkpoint.

import { commands, type EvalSeries, type RunInfo, type StudioError } from "./bindings";
import {
  SeriesStore,
  benchmarks,
  budgetCurves,
  curveSteps,
  evalCurve,
  formatValue,
  isBudgetCategory,
  isErrorMetric,
  lastValue,
  meanBand,
  passAtK,
  seedArms,
  type Arm,
  type BandKind,
  type BandedSeries,
  type SeSeries,
} from "./chartData";
import { compareTable, percent } from "./benchTable";
import { ChartPanel, xAxisSelect } from "./charts";
import { renderDiff } from "./diffView";
import { h } from "./dom";

interface Loaded {
  run: RunInfo;
  store: SeriesStore;
  evals: EvalSeries[];
}

/** The curves of one arm: the mean of its runs' `curves`, or the one run's curve as it is. */
function armCurve(key: string, curves: SeSeries[], kind: BandKind): BandedSeries | null {
  if (curves.length === 0) return null;
  return meanBand(key, curves, kind);
}

export class CompareView {
  private readonly runList = h("div", { id: "compare-runs", class: "compare-runs" });
  private readonly metricSelect = h("select", { id: "compare-metric", "aria-label": "Metric" });
  private readonly xAxis = xAxisSelect("compare-xaxis", (axis) => this.chart.setXAxis(axis));
  private readonly groupBox = h("input", { id: "compare-group", type: "checkbox", checked: true });
  private readonly bandSelect = h(
    "select",
    { id: "compare-band", "aria-label": "Band" },
    h("option", { value: "sd" }, "± sd"),
    h("option", { value: "se" }, "± standard error"),
  );
  private readonly onError = (what: string, detail: string) => this.showError({ what, detail, file: null, field: null });
  private readonly chart = new ChartPanel("compare", "Metric by arm", this.onError);
  private readonly evalSelect = h("select", { id: "compare-eval", "aria-label": "Benchmark value" });
  private readonly benchChart = new ChartPanel("compare-bench", "Benchmark by arm", this.onError);
  private readonly stepSelect = h("select", { id: "compare-step", "aria-label": "Checkpoint" });
  private readonly budgetMetric = h(
    "select",
    { id: "compare-budget-metric", "aria-label": "Budget metric" },
    h("option", { value: "score" }, "score"),
    h("option", { value: "success" }, "success"),
  );
  private readonly passChart = new ChartPanel("compare-passk", "pass@k at the checkpoint", this.onError, "k");
  private readonly budgetChart = new ChartPanel("compare-budget", "Score vs imagined attempts at the checkpoint", this.onError, "N");
  private readonly arms = h("div", { id: "compare-arms", class: "chart-note" });
  private readonly table = h("table", { id: "compare-table", class: "data-table" });
  private readonly benchTable = h("table", { id: "compare-bench-table", class: "data-table" });
  private readonly leftSelect = h("select", { id: "compare-left", "aria-label": "Left run" });
  private readonly rightSelect = h("select", { id: "compare-right", "aria-label": "Right run" });
  private readonly diff = h("pre", { id: "compare-diff", class: "diff" });
  private readonly message = h("div", { class: "message" });
  private runs: RunInfo[] = [];
  private loaded = new Map<number, Loaded>();

  constructor(root: HTMLElement) {
    this.metricSelect.addEventListener("change", () => this.drawChart());
    this.groupBox.addEventListener("change", () => this.drawAll());
    this.bandSelect.addEventListener("change", () => this.drawAll());
    this.evalSelect.addEventListener("change", () => {
      this.fillSteps();
      this.drawBenchmarks();
    });
    this.stepSelect.addEventListener("change", () => this.drawCurves());
    this.budgetMetric.addEventListener("change", () => this.drawCurves());
    root.replaceChildren(
      this.message,
      h(
        "div",
        { class: "compare-body" },
        h(
          "div",
          { class: "compare-side" },
          h("h3", {}, "Runs"),
          h("p", { class: "help" }, "Runs that differ only in seed are listed together as one arm."),
          this.runList,
          h("button", { id: "compare-button", class: "primary", onclick: () => void this.compare() }, "Compare"),
        ),
        h(
          "div",
          { class: "compare-main" },
          h(
            "div",
            { class: "toolbar" },
            h("label", {}, "Metric ", this.metricSelect),
            h("label", { title: "Overlay the runs over training steps or over wall time since each run's first step" }, "X axis ", this.xAxis),
            h("label", { title: "Draw runs that differ only in seed as one arm: their mean with a band" }, this.groupBox, " Group seeds"),
            h("label", { title: "The band around an arm's mean: one standard deviation over its seeds, or one standard error of the mean (sd / √n)" }, "Band ", this.bandSelect),
          ),
          this.arms,
          this.chart.element,
          h("h3", {}, "Benchmarks"),
          h(
            "div",
            { class: "toolbar" },
            h("label", {}, "Value ", this.evalSelect),
            h("label", { title: "The evaluated step whose pass@k and rehearsal-budget curves are drawn" }, "Checkpoint ", this.stepSelect),
            h("label", {}, "Budget metric ", this.budgetMetric),
          ),
          this.benchChart.element,
          h("div", { class: "compare-curves" }, this.passChart.element, this.budgetChart.element),
          h(
            "div",
            { class: "chart-note", id: "compare-curves-note" },
            "pass@k comes with [eval].n_trials > 1, the rehearsal-budget curve (N = 0 is the plain evaluation) with [rehearsal].budget_curve, evaluated after the last step. An arm of one run is drawn ± its own standard error over tasks where one was stored.",
          ),
          h("h3", {}, "Public benchmarks"),
          h("p", { class: "help" }, "Each run at its latest evaluated checkpoint, as in the Benchmarks tab."),
          h("div", { class: "table-scroll" }, this.benchTable),
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

  /** Refreshes the run list, keeping the runs ticked; runs of one arm are listed together. */
  async show(): Promise<void> {
    const result = await commands.listRuns();
    if (result.status === "error") return this.showError(result.error);
    const ticked = new Set(this.ticked());
    this.runs = result.data;
    const pick = (run: RunInfo, inArm: boolean) =>
      h(
        "label",
        { class: inArm ? "run-pick in-arm" : "run-pick" },
        h("input", { type: "checkbox", class: "run-box", value: run.id, "data-arm": run.arm, checked: ticked.has(run.id) }),
        ` ${run.id} · ${run.name} (${run.status}, step ${run.last_step ?? "–"}${inArm && run.setup ? `, seed ${run.setup.seed}` : ""})`,
      );
    const armsInOrder = [...new Set(this.runs.map((r) => r.arm))];
    this.runList.replaceChildren(
      ...armsInOrder.map((arm) => {
        const members = this.runs.filter((r) => r.arm === arm);
        if (members.length === 1) return pick(members[0], false);
        const toggle = h("input", { type: "checkbox", class: "arm-box", "data-arm": arm, checked: members.every((m) => ticked.has(m.id)) });
        toggle.addEventListener("change", () => {
          for (const box of this.runList.querySelectorAll<HTMLInputElement>(`input.run-box[data-arm="${arm}"]`)) box.checked = toggle.checked;
        });
        const names = [...new Set(members.map((m) => m.name))].join(" / ");
        return h(
          "div",
          { class: "arm-group", "data-arm": arm },
          h("label", { class: "arm-pick", title: "These runs differ only in seed" }, toggle, ` ${names} × ${members.length} seeds`),
          ...members.map((m) => pick(m, true)),
        );
      }),
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
    return [...this.runList.querySelectorAll<HTMLInputElement>("input.run-box")].filter((c) => c.checked).map((c) => Number(c.value));
  }

  private bandKind(): BandKind {
    return this.bandSelect.value === "se" ? "se" : "sd";
  }

  /** The arms of the loaded runs, as the "Group seeds" box asks. */
  private currentArms(): Arm[] {
    return seedArms(
      [...this.loaded.values()].map((l) => l.run),
      [...this.loaded.keys()],
      this.groupBox.checked,
    );
  }

  /** Loads the ticked runs' metrics and benchmark results, then draws the charts and the table. */
  private async compare(): Promise<void> {
    const ids = this.ticked();
    if (ids.length === 0) return this.showError({ what: "Nothing to compare", detail: "tick one or more runs", file: null, field: null });
    this.message.replaceChildren();
    this.loaded = new Map();
    for (const id of ids) {
      const [metrics, evals] = await Promise.all([commands.runMetrics(id), commands.runEvals(id)]);
      if (metrics.status === "error") return this.showError(metrics.error);
      if (evals.status === "error") return this.showError(evals.error);
      const run = this.runs.find((r) => r.id === id);
      if (run) this.loaded.set(id, { run, store: new SeriesStore(metrics.data.series), evals: evals.data.series });
    }
    const keys = [...new Set([...this.loaded.values()].flatMap((l) => l.store.keys()))].sort();
    const previous = this.metricSelect.value;
    this.metricSelect.replaceChildren(...keys.map((k) => h("option", { value: k }, k)));
    this.metricSelect.value = keys.includes(previous) ? previous : keys.includes("sft/loss") ? "sft/loss" : (keys[0] ?? "");
    this.fillEvalValues();
    this.fillSteps();
    this.drawAll();
    this.drawTable(keys);
    if (ids.length >= 2) {
      this.leftSelect.value = String(ids[1]);
      this.rightSelect.value = String(ids[0]);
    }
  }

  private allEvals(): EvalSeries[] {
    return [...this.loaded.values()].flatMap((l) => l.evals);
  }

  /** The benchmark values to pick from: every benchmark, category and metric over steps. */
  private fillEvalValues(): void {
    const seen = new Map<string, string>();
    for (const s of this.allEvals()) {
      if (isErrorMetric(s.metric) || isBudgetCategory(s.category)) continue;
      seen.set(JSON.stringify([s.benchmark, s.category, s.metric]), `${s.benchmark} · ${s.category}/${s.metric}`);
    }
    const values = [...seen.keys()].sort((a, b) => (seen.get(a) ?? "").localeCompare(seen.get(b) ?? ""));
    const previous = this.evalSelect.value;
    this.evalSelect.replaceChildren(...values.map((v) => h("option", { value: v }, seen.get(v) ?? v)));
    const fallback = values.find((v) => v === JSON.stringify(["generated_test", "all", "score"])) ?? values[0] ?? "";
    this.evalSelect.value = values.includes(previous) ? previous : fallback;
  }

  /** The picked benchmark value: `[benchmark, category, metric]`, or null. */
  private evalValue(): [string, string, string] | null {
    if (!this.evalSelect.value) return null;
    const parsed = JSON.parse(this.evalSelect.value) as [string, string, string];
    return parsed;
  }

  /** The checkpoints with pass@k or budget points of the picked benchmark; the latest by default. */
  private fillSteps(): void {
    const benchmark = this.evalValue()?.[0] ?? benchmarks(this.allEvals())[0] ?? "";
    const steps = [...new Set([...this.loaded.values()].flatMap((l) => curveSteps(l.evals, benchmark)))].sort((a, b) => a - b);
    const previous = this.stepSelect.value;
    this.stepSelect.replaceChildren(...steps.map((s) => h("option", { value: s }, String(s))));
    const last = steps.length > 0 ? String(steps[steps.length - 1]) : "";
    this.stepSelect.value = steps.map(String).includes(previous) ? previous : last;
  }

  private drawAll(): void {
    const arms = this.currentArms();
    this.arms.textContent =
      arms.length === 0
        ? ""
        : `${arms.length} arm${arms.length === 1 ? "" : "s"}: ${arms.map((a) => (a.runs.length > 1 ? `${a.label}, seeds ${a.seeds.join(", ")}` : a.label)).join("; ")}. Band: ${this.bandKind() === "sd" ? "± one standard deviation over the seeds" : "± one standard error of the mean over the seeds (sd / √n)"}.`;
    this.drawChart();
    this.drawBenchmarks();
  }

  private drawChart(): void {
    const key = this.metricSelect.value;
    const series: BandedSeries[] = [];
    const labels: string[] = [];
    for (const arm of this.currentArms()) {
      const members = arm.runs.flatMap((id) => this.loaded.get(id)?.store.get(key) ?? []);
      if (members.length === 0) continue;
      series.push(members.length === 1 ? members[0] : meanBand(key, members, this.bandKind()));
      labels.push(arm.label);
    }
    this.chart.setSeries(series, labels);
  }

  private drawBenchmarks(): void {
    const value = this.evalValue();
    const series: BandedSeries[] = [];
    const labels: string[] = [];
    if (value) {
      const [benchmark, category, metric] = value;
      for (const arm of this.currentArms()) {
        const members = arm.runs.flatMap((id) => evalCurve(this.loaded.get(id)?.evals ?? [], benchmark, category, metric) ?? []);
        const curve = armCurve(`${category}/${metric}`, members, this.bandKind());
        if (!curve) continue;
        series.push(curve);
        labels.push(arm.label);
      }
    }
    this.benchChart.setSeries(series, labels);
    this.drawCurves();
    this.drawBenchTable();
  }

  /** The runs' public-benchmark scores side by side. */
  private drawBenchTable(): void {
    const runs = [...this.loaded.values()].sort((a, b) => a.run.id - b.run.id);
    const compared = compareTable(runs.map((l) => ({ label: `run ${l.run.id} · ${l.run.name}`, series: l.evals })));
    if (compared.columns.length === 0) {
      this.benchTable.replaceChildren(h("tr", {}, h("td", {}, "No public-benchmark scores in these runs.")));
      return;
    }
    const head1 = h("tr", {}, h("th", { rowspan: 2 }, "run"), h("th", { rowspan: 2 }, "step"));
    const head2 = h("tr", {});
    for (const family of compared.families) {
      const columns = compared.columns.filter((c) => c.family === family);
      head1.append(h("th", { colspan: columns.length + 1, class: "family" }, family));
      for (const c of columns) head2.append(h("th", {}, c.label));
      head2.append(h("th", { class: "mean" }, "mean"));
    }
    head1.append(h("th", { rowspan: 2, class: "mean" }, "overall"));
    const rows = compared.rows.map((row) => {
      const tr = h("tr", {}, h("td", {}, row.label), h("td", {}, row.step === null ? "–" : String(row.step)));
      compared.families.forEach((family, f) => {
        compared.columns.forEach((c, i) => {
          if (c.family === family) tr.append(h("td", {}, percent(row.values[i])));
        });
        tr.append(h("td", { class: "mean" }, percent(row.familyMeans[f])));
      });
      tr.append(h("td", { class: "mean" }, percent(row.overall)));
      return tr;
    });
    this.benchTable.replaceChildren(head1, head2, ...rows);
  }

  /** pass@k against k and score against the rehearsal budget N, per arm, at the picked checkpoint. */
  private drawCurves(): void {
    const benchmark = this.evalValue()?.[0] ?? "";
    const step = this.stepSelect.value === "" ? null : Number(this.stepSelect.value);
    const pass: BandedSeries[] = [];
    const passLabels: string[] = [];
    const budget: BandedSeries[] = [];
    const budgetLabels: string[] = [];
    if (step !== null) {
      const metric = this.budgetMetric.value;
      for (const arm of this.currentArms()) {
        const evals = arm.runs.map((id) => this.loaded.get(id)?.evals ?? []);
        const curve = armCurve("pass@k", evals.flatMap((e) => passAtK(e, benchmark, step) ?? []), this.bandKind());
        if (curve) {
          pass.push(curve);
          passLabels.push(arm.label);
        }
        const perRun = evals.map((e) => budgetCurves(e, benchmark, step)?.curves ?? []);
        for (const style of ["parallel", "sequential"]) {
          const key = `${style}/${metric}`;
          const styleCurve = armCurve(key, perRun.flatMap((curves) => curves.filter((c) => c.key === key)), this.bandKind());
          if (!styleCurve) continue;
          budget.push(styleCurve);
          budgetLabels.push(`${arm.label} · ${style}`);
        }
      }
    }
    this.passChart.setSeries(pass, passLabels);
    this.budgetChart.setSeries(budget, budgetLabels);
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
