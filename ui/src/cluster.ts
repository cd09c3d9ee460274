// Scale-out to a cluster: the editor's "Export for cluster…" dialog (a launcher folder for the
// reference verl trainer, its warnings, the settings it needs asked for, a folder that is not
// empty overwritten only when confirmed) and the run list's "Import cluster run…" (a run's
// folder read into the store as an imported run).

import { commands, VERL_SET_KEYS, type StudioError, type VerlExport, type VerlImport } from "./bindings";
import { h } from "./dom";

/** The folder last exported to or imported from: where the next folder picker starts. */
let lastFolder: string | null = null;

function errorText(error: StudioError): string {
  const where = [error.file, error.field].filter(Boolean).join(", ");
  return `${error.what}: ${error.detail}${where ? ` (${where})` : ""}`;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** Asks for a folder with the native picker, starting at `current` (or the last one used). */
async function pickFolder(what: string, current: string | null): Promise<{ path: string | null } | { error: StudioError }> {
  const picked = await commands.pickPath("folder", what, current || lastFolder);
  if (picked.status === "error") return { error: picked.error };
  return { path: picked.data };
}

/**
 * Opens the "Export for cluster" dialog for the config `toml()` gives (after `settled`, any
 * edit still being applied). The dialog's `data-state` says where it stands: `idle`, `busy`,
 * `not-empty`, `missing`, `written` or `error`.
 */
export function openExportDialog(toml: () => string, settled: () => Promise<void>): void {
  document.getElementById("cluster-export")?.remove();
  const values = new Map<string, string>();
  let force = false;
  const folder = h("input", { id: "cluster-out", type: "text", placeholder: "a folder for the launcher", "aria-label": "Launcher folder", value: lastFolder ?? "" });
  const browse = h("button", { id: "cluster-out-browse", type: "button", title: "Choose the folder with the system's picker" }, "Folder…");
  const settings = h("div", { id: "cluster-settings", class: "cluster-settings" });
  const result = h("div", { id: "cluster-result", class: "cluster-result", role: "status" });
  const run = h("button", { id: "cluster-export-run", type: "button", class: "primary" }, "Export");
  const close = h("button", { id: "cluster-close", type: "button" }, "Close");
  const dialog = h(
    "dialog",
    { id: "cluster-export", class: "cluster-dialog", "aria-labelledby": "cluster-export-title", "data-state": "idle" },
    h("h3", { id: "cluster-export-title" }, "Export for cluster"),
    h(
      "p",
      { class: "help" },
      "Writes a launcher for the reference verl trainer on a Ray cluster: run.sh, a README with the prerequisites, this config and its tasks as the checklist dataset (parquet). " +
        "Settings with no equivalent there are listed below, never dropped silently.",
    ),
    h("div", { class: "cluster-folder" }, h("label", { for: "cluster-out" }, "Folder"), folder, browse),
    settings,
    result,
    h("div", { class: "cluster-actions" }, close, run),
  );

  const input = (key: string, help: string, asked: boolean): HTMLElement => {
    const box = h("input", { id: `cluster-set-${key}`, type: "text", value: values.get(key) ?? "", placeholder: asked ? "needed" : "optional", "aria-label": key });
    box.addEventListener("input", () => values.set(key, box.value));
    return h(
      "div",
      { class: `cluster-setting${asked ? " asked" : ""}`, "data-key": key },
      h("label", { for: `cluster-set-${key}` }, h("code", {}, key)),
      box,
      h("div", { class: "help" }, help),
    );
  };
  /** The settings' inputs: those the export asked for first and open, the others folded. */
  const showSettings = (asked: string[]): void => {
    const needed = VERL_SET_KEYS.filter(([key]) => asked.includes(key));
    const rest = VERL_SET_KEYS.filter(([key]) => !asked.includes(key));
    settings.replaceChildren(
      ...(needed.length ? [h("div", { class: "cluster-asked" }, h("h4", {}, "Settings the cluster run needs"), ...needed.map(([key, help]) => input(key, help, true)))] : []),
      h("details", { id: "cluster-more" }, h("summary", {}, needed.length ? "Other cluster settings" : "Cluster settings (model path, judge, nodes…)"), ...rest.map(([key, help]) => input(key, help, false))),
    );
    settings.querySelector<HTMLInputElement>(".asked input")?.focus();
  };
  const setState = (state: string): void => {
    dialog.dataset.state = state;
  };
  const showError = (text: string): void => {
    setState("error");
    result.replaceChildren(h("div", { class: "message error" }, text));
  };
  const showWritten = (report: VerlExport): void => {
    setState("written");
    lastFolder = report.out_dir;
    result.replaceChildren(
      h(
        "div",
        { class: "message info", id: "cluster-written" },
        `Wrote ${report.out_dir}: ${plural(report.n_train, "training task")}, ${plural(report.n_validation, "validation task")}, ${plural(report.n_overrides, "override")}. ` +
          "Copy the folder to the cluster and run bash run.sh there; bring the run's folder back and read it in with “Import cluster run…” on the Runs tab.",
      ),
      h("h4", {}, "Files"),
      h("ul", { id: "cluster-files", class: "cluster-files" }, ...report.files.map((file) => h("li", {}, h("code", {}, file)))),
      h("h4", {}, `Settings with no equivalent (${report.warnings.length})`),
      report.warnings.length
        ? h("ul", { id: "cluster-warnings", class: "cluster-warnings" }, ...report.warnings.map((warning) => h("li", {}, warning)))
        : h("p", { id: "cluster-warnings", class: "help" }, "None: every setting carries over."),
    );
  };
  const showNotEmpty = (report: VerlExport): void => {
    setState("not-empty");
    const overwrite = h("button", { id: "cluster-overwrite", type: "button", class: "danger" }, "Overwrite its files");
    overwrite.addEventListener("click", () => {
      force = true;
      void exportNow();
    });
    result.replaceChildren(
      h("div", { class: "message error cluster-confirm" }, h("span", {}, `${report.problem ?? `${report.out_dir} is not empty`}. Overwrite them, or choose another folder.`), overwrite),
    );
  };
  const showMissing = (report: VerlExport): void => {
    setState("missing");
    showSettings(report.missing);
    result.replaceChildren(
      h("div", { class: "message error", id: "cluster-missing" }, `Not written: ${report.problem ?? "settings are missing"}. Fill them in above and export again.`),
    );
  };

  const exportNow = async (): Promise<void> => {
    setState("busy");
    run.disabled = true;
    result.replaceChildren(h("p", { class: "help" }, "Exporting…"));
    await settled();
    const sets: Record<string, string> = {};
    for (const [key, value] of values) if (value.trim()) sets[key] = value.trim();
    const outcome = await commands.exportVerl(toml(), folder.value, sets, force);
    run.disabled = false;
    if (outcome.status === "error") return showError(errorText(outcome.error));
    const report = outcome.data;
    if (report.written) return showWritten(report);
    if (report.not_empty) return showNotEmpty(report);
    return showMissing(report);
  };

  folder.addEventListener("input", () => {
    // Another folder: an overwrite confirmed for the last one does not carry over.
    force = false;
  });
  browse.addEventListener("click", () => {
    void (async () => {
      const picked = await pickFolder("the cluster launcher", folder.value);
      if ("error" in picked) return showError(errorText(picked.error));
      if (picked.path === null) return;
      folder.value = picked.path;
      force = false;
    })();
  });
  run.addEventListener("click", () => void exportNow());
  close.addEventListener("click", () => {
    dialog.close();
    dialog.remove();
  });
  dialog.addEventListener("close", () => dialog.remove());
  showSettings([]);
  document.body.append(dialog);
  dialog.showModal();
  folder.focus();
}

/** What an import added, in words. */
export function importSummary(report: VerlImport): string {
  const added = `${plural(report.trajectories, "trajectory", "trajectories")}, ${plural(report.metrics, "metric row")}`;
  if (report.created) return `Imported run ${report.run} (${report.name}) from ${report.source}: ${added} added.`;
  if (report.trajectories === 0 && report.metrics === 0) return `Run ${report.run} (${report.name}) is up to date with ${report.source}: nothing new to add.`;
  return `Updated run ${report.run} (${report.name}) from ${report.source}: ${added} added.`;
}

/**
 * The run list's "Import cluster run…" button and the line its outcome goes in; `refresh`
 * reloads the list after an import. The element stays across refreshes of the list.
 */
export class ClusterImport {
  readonly element: HTMLElement;
  private readonly result = h("div", { id: "import-result", class: "import-result", role: "status" });

  constructor(refresh: () => Promise<void>) {
    const button = h(
      "button",
      { id: "import-cluster", title: "Read a verl run's folder (rollout_dumps/, logs/console.log) into the run store; again to follow a live run" },
      "Import cluster run…",
    );
    button.addEventListener("click", () => {
      void (async () => {
        const picked = await pickFolder("the cluster run", null);
        if ("error" in picked) return this.show("error", errorText(picked.error));
        if (picked.path === null) return;
        button.disabled = true;
        this.show("busy", `Importing ${picked.path}…`);
        const outcome = await commands.importVerl(picked.path);
        button.disabled = false;
        if (outcome.status === "error") return this.show("error", errorText(outcome.error));
        const report = outcome.data;
        lastFolder = report.source;
        this.show("done", importSummary(report), report.skipped);
        await refresh();
      })();
    });
    this.element = h("div", { class: "toolbar runs-toolbar" }, button, this.result);
  }

  private show(state: string, text: string, skipped: string[] = []): void {
    this.result.dataset.state = state;
    this.result.className = `import-result message ${state === "error" ? "error" : "info"}`;
    this.result.replaceChildren(
      h("span", { class: "import-summary" }, text),
      ...(skipped.length
        ? [
            h(
              "details",
              { class: "import-skipped", open: true },
              h("summary", {}, `${plural(skipped.length, "line")} not imported`),
              h("ul", {}, ...skipped.map((line) => h("li", {}, h("code", {}, line)))),
            ),
          ]
        : []),
    );
  }
}
