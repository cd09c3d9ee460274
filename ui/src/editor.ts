// The experiment editor: a form generated from the config schema, a TOML view kept in sync,
// live validation by the engine with errors next to their fields, presets, open/save, a diff and
// "Export for cluster…" (cluster.ts).

import { commands, type ConfigCheck, type Document, type FieldIssue, type PathPick, type StudioError } from "./bindings";
import { openExportDialog } from "./cluster";
import { h } from "./dom";
import { renderDiff } from "./diffView";
import {
  allFields,
  buildForm,
  fieldForIssue,
  parseInput,
  valueAt,
  type Field,
  type Json,
  type Section,
} from "./schemaForm";

interface EditorState {
  toml: string;
  path: string | null;
  preset: string | null;
  check: ConfigCheck;
  savedToml: string | null;
}

export class Editor {
  private state: EditorState;
  private sections: Section[] = [];
  private fields: Field[] = [];
  private readonly root: HTMLElement;
  private readonly form = h("div", { class: "form", id: "config-form" });
  private readonly tomlView = h("textarea", {
    id: "toml-view",
    spellcheck: "false",
    "aria-label": "Config as TOML",
  });
  private readonly problems = h("ul", { id: "problems", class: "problems" });
  private readonly status = h("span", { id: "config-status", class: "status" });
  private readonly fileLabel = h("span", { id: "config-file", class: "file" });
  private readonly diffView = h("pre", { id: "preset-diff", class: "diff", hidden: true });
  private readonly presetSelect = h("select", { id: "preset-select", "aria-label": "Preset" });
  private readonly message = h("div", { id: "editor-message", class: "message", role: "status" });
  private tomlTimer: number | undefined;
  private pending: Promise<void> = Promise.resolve();

  constructor(root: HTMLElement, document: Document, schema: Json) {
    this.root = root;
    this.state = {
      toml: document.toml,
      path: document.path,
      preset: document.preset,
      check: document.check,
      savedToml: document.path ? document.toml : null,
    };
    this.sections = buildForm(schema as { [key: string]: Json });
    this.fields = allFields(this.sections);
  }

  /** The TOML text as shown (what Start trains), including a typed edit not yet checked. */
  toml(): string {
    return this.tomlView.value || this.state.toml;
  }

  async mount(): Promise<void> {
    const presets = await commands.presets();
    for (const preset of presets) {
      this.presetSelect.append(h("option", { value: preset.name, title: preset.summary }, preset.name));
    }
    this.presetSelect.addEventListener("change", () => void this.openPreset(this.presetSelect.value));
    this.tomlView.addEventListener("input", () => {
      window.clearTimeout(this.tomlTimer);
      this.tomlTimer = window.setTimeout(() => void this.tomlEdited(), 250);
    });
    const toolbar = h(
      "div",
      { class: "toolbar" },
      h("button", { id: "open-button", onclick: () => void this.open() }, "Open…"),
      h("button", { id: "save-button", onclick: () => void this.save(false) }, "Save"),
      h("button", { id: "save-as-button", onclick: () => void this.save(true) }, "Save as…"),
      h("label", {}, "Preset ", this.presetSelect),
      h("button", { id: "diff-button", onclick: () => void this.toggleDiff() }, "Diff vs preset"),
      h(
        "button",
        { id: "export-cluster", title: "Write a launcher for the reference verl trainer on a Ray cluster", onclick: () => openExportDialog(() => this.toml(), () => this.pending) },
        "Export for cluster…",
      ),
      this.status,
      this.fileLabel,
    );
    this.root.replaceChildren(
      toolbar,
      this.message,
      h(
        "div",
        { class: "editor-body" },
        h("nav", { class: "section-nav" }, ...this.sections.map((s) => this.navLink(s))),
        this.form,
        h("div", { class: "side" }, h("h3", {}, "TOML"), this.tomlView, this.diffView, h("h3", {}, "Problems"), this.problems),
      ),
    );
    this.renderForm();
    this.refresh();
  }

  private navLink(section: Section): HTMLElement {
    return h("a", { href: `#section-${section.id}` }, section.title);
  }

  /** Runs edits one after another, so a fast typist's changes apply in order. */
  private enqueue(job: () => Promise<void>): Promise<void> {
    this.pending = this.pending.then(job, job);
    return this.pending;
  }

  private renderForm(): void {
    this.form.replaceChildren(...this.sections.map((s) => this.renderSection(s)));
  }

  private renderSection(section: Section): HTMLElement {
    const present = valueAt(this.state.check.values as Json, section.path) !== undefined;
    const body: HTMLElement[] = [];
    if (section.optional && !present) {
      body.push(
        h("p", { class: "help" }, "Not set. ", section.help),
      );
    } else {
      if (isEndpoint(section)) body.push(this.connectionCheck(section));
      if (section.id === "backend") body.push(this.deviceCheck());
      body.push(...section.fields.map((f) => this.renderField(f)));
      if (isEndpoint(section)) body.push(this.apiKeyRow(section));
      body.push(...section.sections.map((s) => this.renderSection(s)));
    }
    return h(
      "section",
      { id: `section-${section.id}`, class: "form-section" },
      h("h2", { title: section.help }, section.title),
      section.help && !(section.optional && !present) ? h("p", { class: "help" }, section.help) : null,
      ...body,
    );
  }

  /** A "Check connection" button for an endpoint table and the line its result goes in. */
  private connectionCheck(section: Section): HTMLElement {
    return this.checkRow(section.id, "List the endpoint's models and time a one-token chat completion", "Check connection", async () => {
      const outcome = await commands.checkEndpoint(this.state.toml, section.path);
      if (outcome.status === "error") return outcome;
      const check = outcome.data;
      const title = [check.models.length ? `Models: ${check.models.join(", ")}` : "", check.models_error ? `Model list: ${check.models_error}` : ""].filter(Boolean).join("\n");
      return { status: "ok" as const, data: { ok: check.ok, summary: check.summary, title } };
    });
  }

  /**
   * A "Check device" button for `[backend]`: where training runs and which GPU adapter a role
   * placed on wgpu will generate on, opened as a job opens them at its start.
   */
  private deviceCheck(): HTMLElement {
    return this.checkRow("backend", "Open the training device and the wgpu adapter this config asks for", "Check device", async () => {
      const outcome = await commands.checkDevice(this.state.toml);
      if (outcome.status === "error") return outcome;
      const check = outcome.data;
      return { status: "ok" as const, data: { ok: check.ok, summary: check.summary, title: check.adapter ? `Adapter: ${check.adapter}` : "" } };
    });
  }

  /**
   * A check button (`check-ID`) and the line its result goes in (`check-result-ID`, with
   * `data-ok` once it has ended): `run` asks the engine, after any edit still being applied.
   */
  private checkRow(
    id: string,
    help: string,
    label: string,
    run: () => Promise<{ status: "ok"; data: { ok: boolean; summary: string; title: string } } | { status: "error"; error: StudioError }>,
  ): HTMLElement {
    const result = h("span", { id: `check-result-${id}`, class: "check-result", role: "status" });
    const button = h("button", { id: `check-${id}`, title: help }, label);
    button.addEventListener("click", () => {
      void (async () => {
        button.disabled = true;
        delete result.dataset.ok;
        result.className = "check-result";
        result.textContent = "Checking…";
        await this.pending;
        const outcome = await run();
        button.disabled = false;
        if (outcome.status === "error") {
          result.className = "check-result check-bad";
          result.textContent = `${outcome.error.detail}${outcome.error.field ? ` (${outcome.error.field})` : ""}`;
          result.dataset.ok = "false";
          return;
        }
        const check = outcome.data;
        result.className = `check-result ${check.ok ? "check-ok" : "check-bad"}`;
        result.textContent = check.summary;
        result.title = check.title;
        result.dataset.ok = String(check.ok);
      })();
    });
    return h("div", { class: "connection-check" }, button, result);
  }

  /**
   * The endpoint's API key, typed into a password box and stored in the OS keyring under the
   * name its `api_key_env` gives; the key never reaches the TOML.
   */
  private apiKeyRow(section: Section): HTMLElement {
    const name = () => {
      const value = valueAt(this.state.check.values as Json, [...section.path, "api_key_env"]);
      return typeof value === "string" ? value : "";
    };
    const input = h("input", { id: `api-key-${section.id}`, type: "password", autocomplete: "off", placeholder: "paste the API key", "aria-label": "API key" });
    const result = h("div", { id: `api-key-result-${section.id}`, class: "help", role: "status" });
    const show = (ok: boolean, text: string) => {
      result.className = `check-result ${ok ? "check-ok" : "check-bad"}`;
      result.textContent = text;
      result.dataset.ok = String(ok);
    };
    const save = h("button", { id: `api-key-save-${section.id}`, title: "Store the key in the OS keyring under the api_key_env name" }, "Save to keyring");
    save.addEventListener("click", () => {
      void (async () => {
        const outcome = await commands.storeApiKey(name(), input.value);
        input.value = "";
        if (outcome.status === "error") return show(false, outcome.error.detail);
        show(true, `Stored in the OS keyring as ${name()}; used when the environment variable is not set.`);
      })();
    });
    const forget = h("button", { id: `api-key-forget-${section.id}`, title: "Remove the key stored under the api_key_env name" }, "Forget");
    forget.addEventListener("click", () => {
      void (async () => {
        const outcome = await commands.forgetApiKey(name());
        if (outcome.status === "error") return show(false, outcome.error.detail);
        show(true, outcome.data ? `Removed the key stored as ${name()}.` : `No key was stored as ${name()}.`);
      })();
    });
    return h(
      "div",
      { class: "field api-key", "data-path": `${section.id}.api_key` },
      h("label", { for: `api-key-${section.id}` }, "API key"),
      h("span", { class: "path-input" }, input, save, forget),
      h("span", {}),
      h("div", { class: "help" }, "Kept in the OS keyring under the api_key_env name, never in the file."),
      result,
    );
  }

  private renderField(field: Field): HTMLElement {
    const current = valueAt(this.state.check.values as Json, field.path);
    const value = current !== undefined ? current : field.defaultValue;
    const isDefault = current === undefined;
    const input = this.inputFor(field, value ?? null);
    const error = h("div", { class: "field-error", id: `error-${field.id}` });
    const reset = isDefault
      ? h("span", { class: "default-tag" }, "default")
      : h(
          "button",
          {
            class: "reset",
            title: "Remove the key so its default applies",
            onclick: () => void this.enqueue(() => this.applyEdit(commands.removeField(this.state.toml, field.path))),
          },
          "reset",
        );
    return h(
      "div",
      { class: "field", "data-path": field.id },
      h("label", { for: `field-${field.id}`, title: field.id }, field.label, field.required ? " *" : ""),
      input,
      field.required ? null : reset,
      h("div", { class: "help" }, field.help),
      error,
    );
  }

  private inputFor(field: Field, value: Json): HTMLElement {
    const id = `field-${field.id}`;
    const widget = field.widget;
    const commit = (raw: string) => {
      const parsed = parseInput(widget, raw);
      if ("error" in parsed) {
        this.showFieldError(field.id, [parsed.error]);
        return;
      }
      void this.enqueue(() => this.applyEdit(commands.setField(this.state.toml, field.path, parsed.value)));
    };
    switch (widget.kind) {
      case "select": {
        const select = h("select", { id });
        for (const choice of widget.choices) {
          select.append(h("option", { value: choice.value, title: choice.help, selected: choice.value === value }, choice.value));
        }
        select.addEventListener("change", () => commit(select.value));
        return select;
      }
      case "multiselect": {
        const chosen = new Set(Array.isArray(value) ? value.map(String) : []);
        const box = h("div", { id, class: "multi", role: "group" });
        for (const choice of widget.choices) {
          const check = h("input", { type: "checkbox", value: choice.value, checked: chosen.has(choice.value) });
          check.addEventListener("change", () => {
            const picked = [...box.querySelectorAll("input")].filter((i) => i.checked).map((i) => i.value);
            void this.enqueue(() => this.applyEdit(commands.setField(this.state.toml, field.path, picked)));
          });
          box.append(h("label", { title: choice.help }, check, choice.value));
        }
        return box;
      }
      case "checkbox": {
        const check = h("input", { id, type: "checkbox", checked: value === true });
        check.addEventListener("change", () => commit(String(check.checked)));
        return check;
      }
      case "slider": {
        const number = h("input", { id, type: "number", value: String(value ?? ""), step: widget.integer ? 1 : "any" });
        const slider = h("input", {
          type: "range",
          min: widget.min,
          max: widget.max,
          step: widget.step,
          value: String(value ?? widget.min),
          "aria-label": field.label,
        });
        slider.addEventListener("input", () => (number.value = slider.value));
        slider.addEventListener("change", () => commit(slider.value));
        number.addEventListener("change", () => commit(number.value));
        return h("span", { class: "slider" }, slider, number);
      }
      case "number": {
        const number = h("input", { id, type: "text", inputmode: "decimal", value: value === null ? "" : String(value) });
        number.addEventListener("change", () => commit(number.value));
        return number;
      }
      default: {
        if (Array.isArray(value) && value.some((item) => item !== null && typeof item === "object")) {
          // A list of tables (e.g. [[env.mcp_servers]]) has no form widget: it is shown whole
          // and edited in the TOML view.
          return h("input", {
            id,
            type: "text",
            readonly: true,
            class: "table-list",
            value: JSON.stringify(value),
            title: "A list of tables: edit it in the TOML view",
          });
        }
        const text = h("input", {
          id,
          type: "text",
          value: value === null ? "" : String(value),
          placeholder: widget.kind === "path" ? `a ${widget.pick.replace(/-/g, " ")} path` : "",
        });
        text.addEventListener("change", () => commit(text.value));
        if (widget.kind !== "path") return text;
        // Native pickers: a folder, and for a model also a GGUF file (one dialog cannot offer both).
        const browse = (pick: PathPick, label: string, suffix: string) =>
          h(
            "button",
            {
              id: `browse-${suffix}-${field.id}`,
              class: "browse",
              onclick: () =>
                void (async () => {
                  const picked = await commands.pickPath(pick, field.id, text.value || null);
                  if (picked.status === "error") return this.showError(picked.error);
                  if (picked.data === null) return;
                  text.value = picked.data;
                  commit(picked.data);
                })(),
            },
            label,
          );
        return h(
          "span",
          { class: "path-input" },
          text,
          widget.pick === "file" ? null : browse("folder", "Folder…", "folder"),
          widget.pick === "folder" ? null : browse("gguf_file", "GGUF file…", "file"),
        );
      }
    }
  }

  private async applyEdit(request: Promise<{ status: "ok"; data: { toml: string; check: ConfigCheck } } | { status: "error"; error: StudioError }>): Promise<void> {
    const result = await request;
    if (result.status === "error") {
      this.showError(result.error);
      return;
    }
    this.state.toml = result.data.toml;
    this.state.check = result.data.check;
    this.tomlView.value = this.state.toml;
    this.renderForm();
    this.refresh();
  }

  private async tomlEdited(): Promise<void> {
    this.state.toml = this.tomlView.value;
    this.state.check = await commands.checkConfig(this.state.toml);
    this.renderForm();
    this.refresh();
  }

  private showFieldError(id: string, messages: string[]): void {
    const slot = this.form.querySelector<HTMLElement>(`[id="error-${id}"]`);
    if (slot) slot.textContent = messages.join("; ");
    slot?.closest(".field")?.classList.toggle("invalid", messages.length > 0);
  }

  /** Shows every issue next to its field, or in the problems list when no field owns it. */
  private refresh(): void {
    if (this.tomlView.value !== this.state.toml) this.tomlView.value = this.state.toml;
    const byField = new Map<string, FieldIssue[]>();
    const loose: FieldIssue[] = [];
    for (const issue of this.state.check.issues) {
      const field = fieldForIssue(this.fields, issue.path);
      if (field) byField.set(field.id, [...(byField.get(field.id) ?? []), issue]);
      else loose.push(issue);
    }
    for (const field of this.fields) {
      this.showFieldError(field.id, (byField.get(field.id) ?? []).map((i) => i.message));
    }
    this.problems.replaceChildren(
      ...this.state.check.issues.map((issue) =>
        h("li", { class: loose.includes(issue) ? "loose" : "" }, `${issue.line}:${issue.column} `, issue.path ? h("code", {}, issue.path) : "", " ", issue.message),
      ),
    );
    const n = this.state.check.issues.length;
    this.status.textContent = n === 0 ? "valid" : `${n} problem${n === 1 ? "" : "s"}`;
    this.status.className = n === 0 ? "status ok" : "status bad";
    const dirty = this.state.savedToml !== this.state.toml;
    this.fileLabel.textContent = `${this.state.path ?? "not saved yet"}${dirty ? " (modified)" : ""}`;
    if (this.state.preset) this.presetSelect.value = this.state.preset;
    if (!this.diffView.hidden) void this.showDiff();
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

  private async openPreset(name: string): Promise<void> {
    const result = await commands.openPreset(name, this.state.path);
    if (result.status === "error") return this.showError(result.error);
    this.load(result.data, false);
    this.showInfo(`Loaded preset ${name}.`);
  }

  private load(document: Document, saved: boolean): void {
    this.state = {
      toml: document.toml,
      path: document.path,
      preset: document.preset ?? this.state.preset,
      check: document.check,
      savedToml: saved ? document.toml : this.state.savedToml,
    };
    this.renderForm();
    this.refresh();
  }

  private async open(): Promise<void> {
    const result = await commands.openConfig();
    if (result.status === "error") return this.showError(result.error);
    if (result.data) this.load(result.data, true);
  }

  private async save(askWhere: boolean): Promise<void> {
    await this.pending;
    const result = await commands.saveConfig(this.state.toml, askWhere ? null : this.state.path);
    if (result.status === "error") return this.showError(result.error);
    if (result.data === null) return;
    this.state.path = result.data;
    this.state.savedToml = this.state.toml;
    const n = this.state.check.issues.length;
    this.showInfo(`Saved to ${result.data}${n ? ` (with ${n} problem${n === 1 ? "" : "s"} still to fix)` : ""}.`);
    this.refresh();
  }

  private async toggleDiff(): Promise<void> {
    this.diffView.hidden = !this.diffView.hidden;
    if (!this.diffView.hidden) await this.showDiff();
  }

  private async showDiff(): Promise<void> {
    const preset = this.state.preset ?? "quickstart";
    const result = await commands.diffAgainstPreset(this.state.toml, preset);
    if (result.status === "error") return this.showError(result.error);
    this.diffView.replaceChildren(...renderDiff(result.data, `Changes against preset ${preset}:`, `Same as preset ${preset}.`));
  }
}

/** An endpoint table (LLM judge, external simulator): it has a `url` and a `model`. */
function isEndpoint(section: Section): boolean {
  const keys = new Set(section.fields.map((f) => f.path[f.path.length - 1]));
  return keys.has("url") && keys.has("model");
}
