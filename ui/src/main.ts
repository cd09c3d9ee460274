// Entry point of the studio's front end: tabs for the experiment editor, training (controls,
// live status, log, charts), the run list (with "Import cluster run…"), the episode viewer,
// the run comparison and the public-benchmark scores.

import "./locale";
import "./style.css";
import { BenchmarkView } from "./benchmarkView";
import { commands } from "./bindings";
import { chartPanels } from "./charts";
import { ClusterImport } from "./cluster";
import { CompareView } from "./compare";
import { h } from "./dom";
import { Editor } from "./editor";
import { EpisodeViewer } from "./episodes";
import { TrainingView } from "./training";

// The chart panels by id, for the console and the end-to-end tests (e.g. an SVG export).
(window as unknown as { __charts: typeof chartPanels }).__charts = chartPanels;

interface Tabs {
  /** Shows a pane; `refresh` false skips its own refresh (the caller loads it). */
  select: (id: string, refresh?: boolean) => void;
}

async function showRuns(root: HTMLElement, importer: ClusterImport, training: TrainingView, episodes: EpisodeViewer, tabs: Tabs): Promise<void> {
  const result = await commands.listRuns();
  if (result.status === "error") {
    root.replaceChildren(importer.element, h("div", { class: "message error" }, `${result.error.what}: ${result.error.detail}`));
    return;
  }
  if (result.data.length === 0) {
    root.replaceChildren(importer.element, h("p", { class: "help" }, "No runs yet."));
    return;
  }
  root.replaceChildren(
    importer.element,
    h(
      "table",
      { id: "run-table" },
      h("tr", {}, h("th", {}, "id"), h("th", {}, "name"), h("th", {}, "status"), h("th", {}, "step"), h("th", {}, "created"), h("th", {}, "")),
      ...result.data.map((run) =>
        h(
          "tr",
          { "data-run": run.id, class: run.imported_from ? "imported" : "" },
          h("td", {}, String(run.id)),
          h(
            "td",
            {},
            run.name,
            run.imported_from ? h("span", { class: "imported-badge", title: `Imported from ${run.imported_from}` }, "imported") : null,
          ),
          h("td", {}, run.status),
          h("td", {}, run.last_step === null ? "-" : String(run.last_step)),
          h("td", {}, new Date((run.created_at ?? 0) * 1000).toISOString().replace("T", " ").slice(0, 19)),
          h(
            "td",
            { class: "actions" },
            h("button", { class: "run-charts", onclick: () => { tabs.select("training", false); void training.showRun(run.id); } }, "Charts"),
            h("button", { class: "run-episodes", onclick: () => { tabs.select("episodes", false); void episodes.show(run.id); } }, "Episodes"),
            !run.imported_from && (run.status === "stopped" || run.status === "failed" || run.status === "paused")
              ? h("button", { class: "run-continue", title: "Continue from its latest checkpoint", onclick: () => { tabs.select("training", false); void training.continueRun(run.id); } }, "Continue")
              : null,
          ),
        ),
      ),
    ),
  );
}

async function main(): Promise<void> {
  const app = document.getElementById("app");
  if (!app) return;
  const panes = {
    editor: h("div", { id: "editor-pane" }),
    training: h("div", { id: "training-pane", class: "pane" }),
    runs: h("div", { id: "runs-pane", class: "pane" }),
    episodes: h("div", { id: "episodes-pane", class: "pane" }),
    compare: h("div", { id: "compare-pane", class: "pane" }),
    benchmarks: h("div", { id: "benchmarks-pane", class: "pane" }),
  };
  type PaneId = keyof typeof panes;
  const onShow: Partial<Record<PaneId, () => void>> = {};
  const buttons = new Map<PaneId, HTMLButtonElement>();
  const tabs: Tabs = {
    select: (id: string, refresh = true) => {
      for (const [name, pane] of Object.entries(panes)) pane.hidden = name !== id;
      for (const [name, button] of buttons) button.classList.toggle("active", name === id);
      if (refresh) onShow[id as PaneId]?.();
    },
  };
  const tab = (id: PaneId, label: string) => {
    const button = h("button", { id: `tab-${id}`, class: "tab", onclick: () => tabs.select(id) }, label);
    buttons.set(id, button);
    return button;
  };
  app.replaceChildren(
    h("header", {}, h("h1", {}, "EnvACE Studio"), tab("editor", "Experiment"), tab("training", "Training"), tab("runs", "Runs"), tab("episodes", "Episodes"), tab("compare", "Compare"), tab("benchmarks", "Benchmarks")),
    ...Object.values(panes),
  );
  const [initial, schema] = await Promise.all([commands.initialDocument(), commands.configSchema()]);
  if (initial.status === "error") {
    panes.editor.replaceChildren(h("div", { class: "message error" }, `${initial.error.what}: ${initial.error.detail}`));
    return;
  }
  const editor = new Editor(panes.editor, initial.data, schema);
  const training = new TrainingView(panes.training, () => editor.toml());
  const episodes = new EpisodeViewer(panes.episodes);
  const compare = new CompareView(panes.compare);
  const benchmarkView = new BenchmarkView(panes.benchmarks);
  const importer: ClusterImport = new ClusterImport(() => showRuns(panes.runs, importer, training, episodes, tabs));
  panes.runs.append(importer.element);
  onShow.runs = () => void showRuns(panes.runs, importer, training, episodes, tabs);
  onShow.episodes = () => void episodes.show();
  onShow.compare = () => void compare.show();
  onShow.benchmarks = () => void benchmarkView.show();
  tabs.select("editor");
  await editor.mount();
  await training.mount();
  document.body.dataset.ready = "true";
}

void main();
