// Entry point of the studio's front end: the experiment editor and the run list.

import "./style.css";
import { commands } from "./bindings";
import { h } from "./dom";
import { Editor } from "./editor";

async function showRuns(root: HTMLElement): Promise<void> {
  const result = await commands.listRuns();
  if (result.status === "error") {
    root.replaceChildren(h("div", { class: "message error" }, `${result.error.what}: ${result.error.detail}`));
    return;
  }
  if (result.data.length === 0) {
    root.replaceChildren(h("p", { class: "help" }, "No runs yet."));
    return;
  }
  root.replaceChildren(
    h(
      "table",
      { id: "run-table" },
      h("tr", {}, h("th", {}, "id"), h("th", {}, "name"), h("th", {}, "status"), h("th", {}, "step"), h("th", {}, "created")),
      ...result.data.map((run) =>
        h(
          "tr",
          {},
          h("td", {}, String(run.id)),
          h("td", {}, run.name),
          h("td", {}, run.status),
          h("td", {}, run.last_step === null ? "-" : String(run.last_step)),
          h("td", {}, new Date((run.created_at ?? 0) * 1000).toISOString().replace("T", " ").slice(0, 19)),
        ),
      ),
    ),
  );
}

async function main(): Promise<void> {
  const app = document.getElementById("app");
  if (!app) return;
  const editorPane = h("div", { id: "editor-pane" });
  const runsPane = h("div", { id: "runs-pane", hidden: true });
  const tab = (id: string, label: string, show: HTMLElement, hide: HTMLElement, onShow?: () => void) =>
    h("button", {
      id,
      class: "tab",
      onclick: () => {
        show.hidden = false;
        hide.hidden = true;
        onShow?.();
      },
    }, label);
  app.replaceChildren(
    h(
      "header",
      {},
      h("h1", {}, "EnvACE Studio"),
      tab("tab-editor", "Experiment", editorPane, runsPane),
      tab("tab-runs", "Runs", runsPane, editorPane, () => void showRuns(runsPane)),
    ),
    editorPane,
    runsPane,
  );
  const [initial, schema] = await Promise.all([commands.initialDocument(), commands.configSchema()]);
  if (initial.status === "error") {
    editorPane.replaceChildren(h("div", { class: "message error" }, `${initial.error.what}: ${initial.error.detail}`));
    return;
  }
  const editor = new Editor(editorPane, initial.data, schema);
  await editor.mount();
  document.body.dataset.ready = "true";
}

void main();
