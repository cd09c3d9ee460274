// The Benchmarks tab's evaluation form: choose a run's checkpoint or a model file, tick
// benchmarks and categories, set the conversation options (user simulator, judge, test-time
// rehearsal), then Start and Stop an `envace eval` job with its progress per benchmark and its
// output; when it has stored its scores the table reloads.

import { commands, events, type EvalEvent, type StudioError } from "./bindings";
import { h } from "./dom";
import { BENCH_CHOICES, evalRequest } from "./evalForm";

const DATA_KEY = "envace.benchmarkData";

export class EvalRunner {
  readonly element: HTMLElement;
  private readonly source = h("select", { id: "eval-source", "aria-label": "Evaluate" }, h("option", { value: "checkpoint" }, "this run's checkpoint"), h("option", { value: "model" }, "a model file"));
  private readonly step = h("select", { id: "eval-step", "aria-label": "Checkpoint" });
  private readonly model = h("input", { id: "eval-model", type: "text", placeholder: "a .gguf file or a model folder", size: 40 });
  private readonly recordAs = h("input", { id: "eval-record-as", type: "text", placeholder: "stored as (default: the file's name)", size: 24 });
  private readonly data = h("input", { id: "eval-data", type: "text", placeholder: "folder holding bfcl/, tau2-bench/, vitabench/", size: 40 });
  private readonly tools = h("input", { id: "eval-tools", type: "text", placeholder: "names of NAME.jsonl datasets in the data folder", size: 30 });
  private readonly limit = h("input", { id: "eval-limit", type: "number", min: 1, value: "20", size: 5 });
  private readonly user = h("input", { id: "eval-user", type: "text", value: "self", size: 24 });
  private readonly judge = h("input", { id: "eval-judge", type: "text", placeholder: "none: judged tasks are masked", size: 24 });
  private readonly rehearsal = h(
    "select",
    { id: "eval-rehearsal", "aria-label": "Test-time rehearsal" },
    ...["off", "parallel:2", "parallel:4", "sequential:2"].map((v) => h("option", { value: v }, v)),
  );
  private readonly trials = h("input", { id: "eval-trials", type: "number", min: 1, value: "1", size: 3 });
  private readonly split = h(
    "select",
    { id: "eval-split", "aria-label": "τ²-bench task split", title: "τ²-bench: every task (base), or the train or test split" },
    ...["base", "train", "test"].map((v) => h("option", { value: v }, v)),
  );
  private readonly boxes: HTMLInputElement[] = [];
  private readonly start = h("button", { id: "eval-start", class: "primary", onclick: () => void this.begin() }, "Start evaluation");
  private readonly stop = h("button", { id: "eval-stop", disabled: true, onclick: () => void commands.stopEval() }, "Stop");
  private readonly status = h("div", { id: "eval-status", class: "chart-note" });
  private readonly bars = h("div", { id: "eval-progress" });
  private readonly log = h("pre", { id: "eval-log", class: "log" });
  private run: number | null = null;
  private running = false;

  constructor(
    private readonly onError: (error: StudioError) => void,
    private readonly onStored: (run: number | null) => void,
  ) {
    this.data.value = localStorage.getItem(DATA_KEY) ?? "";
    const picker = h(
      "button",
      {
        title: "Choose a GGUF file",
        onclick: async () => {
          const picked = await commands.pickPath("gguf_file", "eval-model", this.model.value || null);
          if (picked.status === "error") return this.onError(picked.error);
          if (picked.data) this.model.value = picked.data;
        },
      },
      "GGUF file…",
    );
    const groups = BENCH_CHOICES.map((g) =>
      h(
        "fieldset",
        { class: "bench-group" },
        h("legend", {}, g.group),
        ...g.items.map((item) => {
          const box = h("input", { type: "checkbox", class: "eval-bench", value: item });
          this.boxes.push(box);
          return h("label", { class: "bench-choice" }, box, ` ${item.slice(item.indexOf(":") + 1)}`);
        }),
      ),
    );
    this.source.addEventListener("change", () => this.showSource());
    this.element = h(
      "details",
      { id: "eval-runner", class: "eval-runner" },
      h("summary", {}, "Evaluate…"),
      h("div", { class: "toolbar" }, h("label", {}, "Evaluate ", this.source), h("label", { class: "eval-checkpoint" }, "at step ", this.step), h("span", { class: "eval-model" }, this.model, picker, " ", this.recordAs)),
      h("div", { class: "bench-groups" }, ...groups, h("fieldset", { class: "bench-group" }, h("legend", {}, "Tool-call datasets"), this.tools)),
      h("div", { class: "toolbar" }, h("label", {}, "Data ", this.data), h("label", {}, "First ", this.limit, " tasks each")),
      h(
        "div",
        { class: "toolbar", title: "τ²-bench and VitaBench: who plays the user, who judges, and test-time rehearsal" },
        h("label", {}, "User simulator ", this.user),
        h("label", {}, "Judge ", this.judge),
        h("label", {}, "Rehearsal ", this.rehearsal),
        h("label", {}, "Trials ", this.trials),
        h("label", {}, "τ² split ", this.split),
      ),
      h("div", { class: "toolbar" }, this.start, this.stop),
      this.status,
      this.bars,
      this.log,
    );
    this.showSource();
    void events.evalEvent.listen((event) => this.onEvent(event.payload));
    void commands.activeEval().then((running) => this.setRunning(running));
  }

  /** The run whose checkpoints are offered. */
  async setRun(run: number | null): Promise<void> {
    this.run = run;
    this.step.replaceChildren();
    if (run === null) return;
    const result = await commands.runCheckpoints(run);
    if (result.status === "error") return this.onError(result.error);
    const steps = result.data;
    this.step.replaceChildren(...steps.map((s, i) => h("option", { value: String(s), selected: i === steps.length - 1 }, String(s))));
    if (steps.length === 0 && !this.running) {
      this.source.value = "model";
      this.showSource();
    }
  }

  private showSource(): void {
    const model = this.source.value === "model";
    for (const el of this.element.querySelectorAll<HTMLElement>(".eval-checkpoint")) el.hidden = model;
    for (const el of this.element.querySelectorAll<HTMLElement>(".eval-model")) el.hidden = !model;
  }

  private setRunning(running: boolean): void {
    this.running = running;
    this.start.disabled = running;
    this.stop.disabled = !running;
    this.element.dataset.running = String(running);
  }

  private async begin(): Promise<void> {
    const request = evalRequest({
      source: this.source.value === "model" ? "model" : "checkpoint",
      run: this.run,
      step: this.step.value === "" ? null : Number(this.step.value),
      model: this.model.value,
      recordAs: this.recordAs.value,
      benches: this.boxes.filter((b) => b.checked).map((b) => b.value),
      tools: this.tools.value,
      data: this.data.value,
      limit: this.limit.value,
      user: this.user.value,
      judge: this.judge.value,
      rehearsal: this.rehearsal.value,
      trials: this.trials.value,
      split: this.split.value,
    });
    localStorage.setItem(DATA_KEY, request.data);
    this.log.textContent = "";
    this.bars.replaceChildren();
    const result = await commands.startEval(request);
    if (result.status === "error") {
      this.status.textContent = `${result.error.what}: ${result.error.detail}`;
      this.status.className = "chart-note error";
      return;
    }
    this.setRunning(true);
  }

  private bar(bench: string): HTMLElement {
    const found = this.bars.querySelector<HTMLElement>(`[data-bench="${CSS.escape(bench)}"]`);
    if (found) return found;
    const row = h("div", { class: "eval-bar", "data-bench": bench }, h("span", { class: "bar-label" }, bench), h("progress", { max: 1, value: 0 }), h("span", { class: "bar-value" }, ""));
    this.bars.append(row);
    return row;
  }

  private onEvent(event: EvalEvent): void {
    switch (event.kind) {
      case "started":
        this.setRunning(true);
        this.status.className = "chart-note";
        this.status.textContent = `Running: ${event.command}`;
        break;
      case "progress": {
        const row = this.bar(event.bench);
        const progress = row.querySelector("progress");
        if (progress) {
          progress.max = Math.max(1, event.total);
          progress.value = event.done;
        }
        row.dataset.done = String(event.done);
        row.dataset.total = String(event.total);
        const value = row.querySelector(".bar-value");
        if (value) value.textContent = `${event.done}/${event.total}`;
        break;
      }
      case "line":
        this.log.textContent = `${this.log.textContent ?? ""}${event.text}\n`.split("\n").slice(-200).join("\n");
        this.log.scrollTop = this.log.scrollHeight;
        break;
      case "finished":
        this.setRunning(false);
        this.status.className = event.ok ? "chart-note" : "chart-note error";
        this.status.textContent = event.ok ? `Finished: ${event.message}` : event.stopped ? `Stopped: ${event.message}` : `Failed: ${event.message}`;
        this.element.dataset.finished = event.ok ? "ok" : event.stopped ? "stopped" : "failed";
        if (event.ok) this.onStored(event.run);
        break;
    }
  }
}
