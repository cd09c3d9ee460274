// The Benchmarks tab: a run's public-benchmark scores as the paper's table (a row per evaluated
// checkpoint; BFCL categories, τ²-bench and VitaBench domains, tool-call datasets, columns per
// rehearsal setting, the families' means and the overall mean) with its curves over
// checkpoints, and a
// drill-down from a score to the tasks behind it: each task's score and the checker's reason,
// failing ones first, and for a task its prompt or conversation with the model's calls beside
// the expected ones (or the reward's components).

import { commands, type EvalTaskView, type RunInfo, type StudioError } from "./bindings";
import { percent, scoreTable, tableCurves, taskDetail, type ScoreTable } from "./benchTable";
import { ChartPanel } from "./charts";
import { h } from "./dom";
import { EvalRunner } from "./evalRunner";

export class BenchmarkView {
  private readonly runSelect = h("select", { id: "benchview-run", "aria-label": "Run" });
  private readonly table = h("div", { id: "benchview-table" });
  private readonly tasks = h("div", { id: "benchview-tasks" });
  private readonly message = h("div", { class: "message" });
  private readonly chart = new ChartPanel("benchview", "Scores over checkpoints", (what, detail) => this.error({ what, detail, file: null, field: null }));
  private readonly runner = new EvalRunner(
    (error) => this.error(error),
    (run) => void this.show(run ?? undefined),
  );
  private runs: RunInfo[] = [];
  private shown: { run: number; table: ScoreTable } | null = null;

  constructor(root: HTMLElement) {
    this.runSelect.addEventListener("change", () => void this.load(Number(this.runSelect.value)));
    root.replaceChildren(
      h(
        "section",
        { class: "wide-panel" },
        h("div", { class: "chart-head" }, h("h3", {}, "Public benchmarks"), h("label", {}, "Run ", this.runSelect)),
        h(
          "p",
          { class: "help" },
          "Scores stored by `envace eval --run RUN --bench …` at each checkpoint: BFCL accuracy per category, τ²-bench pass^1 per domain, VitaBench pass@1 (Avg@k) per domain, tool-call F1 per dataset; a column marked @parallel:N or @sequential:N was evaluated with test-time rehearsal. Click a score to see its tasks.",
        ),
        this.runner.element,
        this.message,
        this.table,
        this.chart.element,
        this.tasks,
      ),
    );
  }

  private error(error: StudioError): void {
    this.message.className = "message error";
    this.message.textContent = `${error.what}: ${error.detail}`;
  }

  /** Lists the runs and shows `run` (else the one shown, else the newest). */
  async show(run?: number): Promise<void> {
    const result = await commands.listRuns();
    if (result.status === "error") return this.error(result.error);
    this.runs = result.data;
    this.runSelect.replaceChildren(...this.runs.map((r) => h("option", { value: String(r.id) }, `${r.id} · ${r.name}`)));
    const pick = run ?? this.shown?.run ?? this.runs[this.runs.length - 1]?.id;
    if (pick === undefined) {
      this.table.replaceChildren(h("p", { class: "help" }, "No runs yet: evaluate a model file."));
      void this.runner.setRun(null);
      return;
    }
    this.runSelect.value = String(pick);
    await this.load(pick);
  }

  private async load(run: number): Promise<void> {
    void this.runner.setRun(run);
    this.message.className = "message";
    this.message.textContent = "";
    this.tasks.replaceChildren();
    const result = await commands.runEvals(run);
    if (result.status === "error") return this.error(result.error);
    const table = scoreTable(result.data.series);
    this.shown = { run, table };
    this.chart.setSeries(tableCurves(table));
    if (table.steps.length === 0) {
      this.table.replaceChildren(h("p", { class: "help", id: "benchview-empty" }, `Run ${run} has no public-benchmark scores yet.`));
      return;
    }
    const head1 = h("tr", {}, h("th", { rowspan: 2 }, "step"));
    const head2 = h("tr", {});
    for (const mean of table.familyMeans) {
      const columns = table.columns.filter((c) => c.family === mean.family);
      head1.append(h("th", { colspan: columns.length + 1, class: "family" }, mean.family));
      for (const c of columns) head2.append(h("th", {}, c.label));
      head2.append(h("th", { class: "mean" }, "mean"));
    }
    head1.append(h("th", { rowspan: 2, class: "mean" }, "overall"));
    const rows = table.steps.map((step, row) => {
      const tr = h("tr", {}, h("td", {}, String(step)));
      for (const mean of table.familyMeans) {
        for (const c of table.columns.filter((col) => col.family === mean.family)) {
          const value = c.values[row];
          tr.append(
            value === null
              ? h("td", {}, "–")
              : h(
                  "td",
                  { class: "score-cell" },
                  h(
                    "button",
                    {
                      class: "score",
                      "data-benchmark": c.benchmark,
                      "data-step": String(step),
                      title: `${c.nTasks[row] ?? "?"} tasks; show them`,
                      onclick: () => void this.drill(run, c.benchmark, step),
                    },
                    percent(value),
                  ),
                ),
          );
        }
        tr.append(h("td", { class: "mean" }, percent(mean.values[row])));
      }
      tr.append(h("td", { class: "mean" }, percent(table.overall[row])));
      return tr;
    });
    this.table.replaceChildren(h("table", { class: "data-table", id: "score-table" }, head1, head2, ...rows));
  }

  /** Shows the tasks of `benchmark` at `step`, failing ones first. */
  private async drill(run: number, benchmark: string, step: number): Promise<void> {
    const result = await commands.runEvalTasks(run, benchmark, step);
    if (result.status === "error") return this.error(result.error);
    const all = result.data;
    const failing = all.filter((t) => t.score === null || t.score < 1);
    const onlyFailing = h("input", { type: "checkbox", id: "only-failing", checked: true });
    const list = h("tbody", {});
    const detail = h("div", { id: "task-detail" });
    const fill = () => {
      const shown = onlyFailing.checked ? failing : all;
      list.replaceChildren(
        ...shown.map((task) =>
          h(
            "tr",
            { class: "task-row", "data-task": task.task_id, onclick: () => this.open(detail, task) },
            h("td", {}, task.task_id),
            h("td", {}, String(task.trial)),
            h("td", { class: task.score === null ? "masked" : task.score >= 1 ? "ok" : "wrong" }, task.score === null ? "masked" : task.score.toFixed(2)),
            h("td", { class: "reason" }, task.reason || "—"),
          ),
        ),
      );
    };
    onlyFailing.addEventListener("change", fill);
    fill();
    this.tasks.replaceChildren(
      h("h4", { id: "tasks-title" }, `${benchmark} at step ${step}: ${all.length - failing.length} of ${all.length} right`),
      all.length === 0
        ? h("p", { class: "help" }, "No task records were stored with this score (it was evaluated before records were kept).")
        : h("label", {}, onlyFailing, " only the tasks that lost points"),
      h("div", { class: "table-scroll" }, h("table", { class: "data-table", id: "task-table" }, h("tr", {}, h("th", {}, "task"), h("th", {}, "trial"), h("th", {}, "score"), h("th", {}, "why")), list)),
      detail,
    );
  }

  private open(detail: HTMLElement, task: EvalTaskView): void {
    const shown = taskDetail(task.record);
    const pre = (cls: string, text: string) => h("pre", { class: cls }, text);
    const parts: (Node | string | null)[] = [
      h("h4", {}, `Task ${task.task_id}${task.trial > 0 ? ` (trial ${task.trial})` : ""}`),
      task.reason ? h("p", { class: "reason" }, task.reason) : "",
      shown.facts.length > 0
        ? h("table", { class: "data-table facts" }, ...shown.facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))))
        : null,
      shown.output !== null || shown.expected !== null
        ? h(
            "div",
            { class: "side-by-side", id: "calls" },
            h("div", {}, h("h5", {}, "The model's calls"), pre("model-calls", shown.output ?? "")),
            h("div", {}, h("h5", {}, "Expected"), pre("expected-calls", shown.expected ?? "")),
          )
        : null,
      h("h5", {}, shown.output !== null ? "Prompt" : "Conversation"),
      h(
        "div",
        { class: "conversation" },
        ...shown.messages.map((m) => h("div", { class: `msg msg-${m.role}` }, h("span", { class: "role" }, m.role), pre("content", m.content))),
      ),
    ];
    detail.replaceChildren(...parts.filter((p): p is Node | string => p !== null));
  }
}
