// The training view: Start / Pause / Resume / Stop for the editor's experiment, a live status
// bar (phase, step, tokens/s, ETA), a log panel, the drift alarm, the training charts, the
// benchmark scores and the per-tool fidelity heatmap. It is driven by the host's
// `training-event` events; the store is read only to load a run's history and settings, and
// its benchmark results after each evaluation event.

import { commands, events, type StudioError, type TrainingEvent } from "./bindings";
import { BenchmarkPanel, FidelityHeatmap } from "./benchmarks";
import { CHARTS, SeriesStore, formatDuration, formatValue, keysFor } from "./chartData";
import { ChartPanel, xAxisSelect } from "./charts";
import { h } from "./dom";
import { DriftPanel } from "./drift";
import { askToRunMcpServers } from "./mcpConfirm";

type JobState = "idle" | "starting" | "running" | "pausing" | "paused" | "stopping";

/** Most log lines kept in the panel. */
const MAX_LOG = 1000;

export class TrainingView {
  private readonly root: HTMLElement;
  private readonly getToml: () => string;
  private state: JobState = "idle";
  /** The run being trained, if any. */
  private liveRun: number | null = null;
  /** The run whose charts are shown. */
  private shownRun: number | null = null;
  private store = new SeriesStore();
  private readonly charts = CHARTS.map((c) => new ChartPanel(c.id, c.title, (what, detail) => this.showError({ what, detail, file: null, field: null })));
  private redrawQueued = false;
  private readonly benchmarks = new BenchmarkPanel((error) => this.showError(error));
  private readonly heatmap = new FidelityHeatmap();
  private readonly drift = new DriftPanel((error) => this.showError(error));

  private readonly startButton = h("button", { id: "train-start", class: "primary", onclick: () => void this.start() }, "Start");
  private readonly pauseButton = h("button", { id: "train-pause", onclick: () => void this.command("pausing", commands.pauseTraining()) }, "Pause");
  private readonly resumeButton = h("button", { id: "train-resume", onclick: () => void this.command("running", commands.resumeTraining()) }, "Resume");
  private readonly stopButton = h("button", { id: "train-stop", onclick: () => void this.command("stopping", commands.stopTraining()) }, "Stop");
  private readonly stateLabel = h("span", { id: "train-state", class: "status" }, "idle");
  private readonly runLabel = h("span", { id: "train-run", class: "file" });
  private readonly phaseLabel = h("span", { id: "train-phase" }, "–");
  private readonly stepLabel = h("span", { id: "train-step" }, "–");
  private readonly speedLabel = h("span", { id: "train-speed" }, "–");
  private readonly etaLabel = h("span", { id: "train-eta" }, "–");
  private readonly progress = h("progress", { id: "train-progress", max: 1, value: 0 });
  private readonly message = h("div", { id: "train-message", class: "message", role: "status" });
  private readonly log = h("pre", { id: "train-log", class: "log" });
  private readonly smoothing = h("input", { id: "train-smoothing", type: "range", min: 0, max: 0.99, step: 0.01, value: 0 });
  private readonly smoothingValue = h("span", { class: "file" }, "0.00");
  private readonly xAxis = xAxisSelect("train-xaxis", (axis) => {
    for (const chart of this.charts) chart.setXAxis(axis);
  });

  constructor(root: HTMLElement, getToml: () => string) {
    this.root = root;
    this.getToml = getToml;
  }

  async mount(): Promise<void> {
    this.smoothing.addEventListener("input", () => {
      const w = Number(this.smoothing.value);
      this.smoothingValue.textContent = w.toFixed(2);
      for (const chart of this.charts) chart.setSmoothing(w);
    });
    this.root.replaceChildren(
      h(
        "div",
        { class: "toolbar" },
        this.startButton,
        this.pauseButton,
        this.resumeButton,
        this.stopButton,
        this.stateLabel,
        this.runLabel,
        h("span", { class: "spacer" }),
        h("label", { title: "Draw the curves over training steps or over wall time since the run's first step" }, "X axis ", this.xAxis),
        h("label", { title: "Exponential moving average of each curve (0 = raw values)" }, "Smoothing ", this.smoothing, " ", this.smoothingValue),
      ),
      h(
        "div",
        { class: "statusbar", id: "train-statusbar" },
        h("span", {}, "phase ", this.phaseLabel),
        h("span", {}, "step ", this.stepLabel),
        this.progress,
        h("span", {}, this.speedLabel, " tokens/s"),
        h("span", {}, "ETA ", this.etaLabel),
      ),
      this.message,
      h(
        "div",
        { class: "train-body" },
        h(
          "div",
          { class: "train-main" },
          this.drift.element,
          // The drift chart follows the reward chart.
          h("div", { class: "chart-grid", id: "train-charts" }, ...this.charts.flatMap((c, i) => (i === 0 ? [c.element, this.drift.chartElement] : [c.element]))),
          this.benchmarks.element,
          this.heatmap.element,
        ),
        h("div", { class: "log-panel" }, h("h3", {}, "Log"), this.log),
      ),
    );
    await events.trainingEvent.listen((event) => this.onEvent(event.payload));
    const running = await commands.activeTraining();
    if (running !== null) {
      this.liveRun = running;
      this.setState("running");
      await this.showRun(running);
    } else {
      this.setState("idle");
    }
  }

  /** Shows the charts of `run` from the store (its history so far). */
  async showRun(run: number): Promise<void> {
    const result = await commands.runMetrics(run);
    if (result.status === "error") return this.showError(result.error);
    this.shownRun = run;
    this.store = new SeriesStore(result.data.series);
    this.runLabel.textContent = `run ${run} · ${result.data.name}${run === this.liveRun ? " (training)" : ""}`;
    this.redraw();
    await Promise.all([this.benchmarks.load(run), this.loadSetup(run)]);
  }

  /** Reads the settings of `run` the drift alarm depends on (its judge and tool answers). */
  private async loadSetup(run: number): Promise<void> {
    const runs = await commands.listRuns();
    if (runs.status === "error") return this.showError(runs.error);
    if (this.shownRun !== run) return;
    this.drift.setSetup(runs.data.find((r) => r.id === run)?.setup ?? null);
  }

  private async start(): Promise<void> {
    this.setState("starting");
    this.message.textContent = "";
    this.message.className = "message";
    const toml = this.getToml();
    if (!(await this.confirmMcpServers(toml))) return this.setState("idle");
    const result = await commands.startTraining(toml, null);
    if (result.status === "error") {
      this.setState("idle");
      return this.showError(result.error);
    }
    this.liveRun = result.data;
    if (this.shownRun !== result.data) {
      this.shownRun = result.data;
      this.store = new SeriesStore();
      this.benchmarks.clear();
      this.drift.setSetup(null);
      this.redraw();
    }
    void this.loadSetup(result.data);
    this.runLabel.textContent = `run ${result.data}`;
    this.log.textContent = "";
  }

  /** Continues `run` from its latest checkpoint with its own config. */
  async continueRun(run: number): Promise<void> {
    const config = await commands.runConfig(run);
    if (config.status === "error") return this.showError(config.error);
    this.setState("starting");
    if (!(await this.confirmMcpServers(config.data))) return this.setState("idle");
    const result = await commands.startTraining(config.data, run);
    if (result.status === "error") {
      this.setState("idle");
      return this.showError(result.error);
    }
    this.liveRun = run;
    await this.showRun(run);
  }

  private async command(next: JobState, request: Promise<{ status: "ok"; data: number } | { status: "error"; error: StudioError }>): Promise<void> {
    const before = this.state;
    this.setState(next);
    const result = await request;
    if (result.status === "error") {
      this.setState(before);
      this.showError(result.error);
    }
  }

  private onEvent(event: TrainingEvent): void {
    switch (event.kind) {
      case "started":
        this.liveRun = event.run;
        this.setState("running");
        this.addLog("info", `run ${event.run} ${event.resumed ? "continues from its checkpoint" : "started"}`);
        break;
      case "phase":
        this.phaseLabel.textContent = event.phase;
        this.addLog("info", `phase ${event.phase}: ${event.n_steps} steps from step ${event.first_step}`);
        break;
      case "step": {
        if (this.state === "starting") this.setState("running");
        this.phaseLabel.textContent = event.phase;
        this.stepLabel.textContent = `${event.step} / ${event.total_steps}`;
        this.progress.value = event.total_steps > 0 ? event.step / event.total_steps : 0;
        this.speedLabel.textContent = formatValue(event.tokens_per_sec);
        this.etaLabel.textContent = formatDuration(event.eta_secs);
        if (this.shownRun === event.run) {
          this.store.addStep(event.step, event.metrics, event.wall_time);
          this.queueRedraw();
        }
        break;
      }
      case "eval": {
        const figures = Object.entries(event.metrics)
          .map(([key, value]) => `${key} ${value === null ? "–" : formatValue(value)}`)
          .join(", ");
        this.addLog("info", `eval after step ${event.step}: ${event.benchmark} ${figures}`);
        // The engine announces each evaluation once its rows are stored: read them then.
        if (this.shownRun === event.run) this.benchmarks.refresh(event.run);
        break;
      }
      case "log":
        this.addLog(event.level, event.message);
        break;
      case "checkpoint":
        this.addLog("info", `checkpoint at step ${event.step}: ${event.path}`);
        break;
      case "paused":
        this.setState("paused");
        this.addLog("info", "paused");
        break;
      case "resumed":
        this.setState("running");
        this.addLog("info", "resumed");
        break;
      case "finished":
        if (this.shownRun === event.run) this.benchmarks.refresh(event.run);
        this.liveRun = null;
        this.setState("idle");
        this.stateLabel.textContent = event.status;
        this.stateLabel.dataset.outcome = event.status;
        this.addLog(event.error ? "error" : "info", `run ${event.run} ${event.status}${event.error ? `: ${event.error.detail}` : ""}`);
        if (event.error) this.showError(event.error);
        else this.showInfo(`Run ${event.run} ${event.status}.`);
        break;
    }
  }

  private setState(state: JobState): void {
    this.state = state;
    this.stateLabel.textContent = state;
    this.stateLabel.className = `status state-${state}`;
    delete this.stateLabel.dataset.outcome;
    this.startButton.disabled = state !== "idle";
    this.pauseButton.disabled = state !== "running";
    this.resumeButton.disabled = state !== "paused";
    this.stopButton.disabled = !(state === "running" || state === "paused" || state === "pausing");
  }

  private addLog(level: string, text: string): void {
    const time = new Date().toTimeString().slice(0, 8);
    this.log.append(h("div", { class: `log-${level}` }, `${time} ${level.padEnd(5)} ${text}`));
    while (this.log.childElementCount > MAX_LOG) this.log.firstElementChild?.remove();
    this.log.scrollTop = this.log.scrollHeight;
  }

  private queueRedraw(): void {
    if (this.redrawQueued) return;
    this.redrawQueued = true;
    requestAnimationFrame(() => {
      this.redrawQueued = false;
      this.redraw();
    });
  }

  private redraw(): void {
    const keys = this.store.keys();
    CHARTS.forEach((def, i) => {
      const series = keysFor(def, keys).flatMap((k) => this.store.get(k) ?? []);
      this.charts[i].setSeries(series);
    });
    this.heatmap.update(this.store);
    this.drift.update(this.store);
  }

  /** Asks about the stdio MCP servers `toml` would start that are not confirmed yet; true when
   * there are none left (confirmed now or before), false when the user declined or it failed. */
  private async confirmMcpServers(toml: string): Promise<boolean> {
    const pending = await commands.pendingMcpServers(toml);
    if (pending.status === "error") {
      this.showError(pending.error);
      return false;
    }
    if (pending.data.length === 0) return true;
    if (!(await askToRunMcpServers(pending.data))) {
      this.showInfo("Not started: the experiment's MCP server commands were not confirmed.");
      return false;
    }
    for (const server of pending.data) {
      const confirmed = await commands.confirmMcpServer(server.argv);
      if (confirmed.status === "error") {
        this.showError(confirmed.error);
        return false;
      }
    }
    return true;
  }

  private showError(error: StudioError): void {
    const where = [error.file, error.field].filter(Boolean).join(", ");
    this.message.textContent = `${error.what}: ${error.detail}${where ? ` (${where})` : ""}`;
    this.message.className = "message error";
  }

  private showInfo(text: string): void {
    this.message.textContent = text;
    this.message.className = "message info";
  }
}
