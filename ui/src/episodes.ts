// The episode viewer: a run's episodes at one step, shown turn by turn; each rehearsed call's
// answer beside the real environment's answer as a JSON diff (differing leaves highlighted),
// with its fidelity scores.

import { commands, type CallView, type EpisodeView, type StudioError } from "./bindings";
import { h } from "./dom";
import { differingLeaves, jsonLines, type Json } from "./jsonDiff";

function errorBox(error: StudioError): HTMLElement {
  const where = [error.file, error.field].filter(Boolean).join(", ");
  return h("div", { class: "message error" }, `${error.what}: ${error.detail}${where ? ` (${where})` : ""}`);
}

function jsonBlock(value: Json, changed: ReadonlySet<string>, side: string): HTMLElement {
  return h(
    "pre",
    { class: `json side-${side}` },
    ...jsonLines(value, changed).map((line) =>
      h("div", { class: line.changed ? "json-line json-changed" : "json-line", style: `padding-left: ${line.indent * 14}px`, title: line.path ?? "" }, line.text),
    ),
  );
}

function score(label: string, value: boolean | number | null): HTMLElement {
  const text = value === null ? "–" : typeof value === "boolean" ? (value ? "yes" : "no") : value.toFixed(2);
  const good = value === null ? false : typeof value === "boolean" ? value : value >= 0.999;
  return h("span", { class: `score ${good ? "score-good" : "score-bad"}` }, `${label} ${text}`);
}

function callView(call: CallView): HTMLElement {
  const name = call.name ?? "(malformed call)";
  const head = h(
    "div",
    { class: "call-head" },
    h("code", {}, `${name}(${JSON.stringify(call.arguments)})`),
    h("span", { class: `source source-${call.source}` }, call.source),
  );
  if (call.real !== null && call.source !== "real") {
    const changed = differingLeaves(call.response as Json, call.real as Json);
    const s = call.scores;
    return h(
      "div",
      { class: "call" },
      head,
      s
        ? h(
            "div",
            { class: "scores" },
            score("valid JSON", s.valid_json),
            score("same outcome", s.outcome_agrees),
            score("key F1", s.key_f1),
            score("value accuracy", s.value_accuracy),
            score("exact", s.exact_match),
          )
        : null,
      h(
        "div",
        { class: "call-pair" },
        h("div", { class: "pair-side" }, h("h5", {}, call.source === "external" ? "Simulator (external)" : "Rehearsed (policy)"), jsonBlock(call.response as Json, changed, "rehearsed")),
        h("div", { class: "pair-side" }, h("h5", {}, "Real environment"), jsonBlock(call.real as Json, changed, "real")),
      ),
      call.simulator_text ? h("details", {}, h("summary", {}, "What the simulator wrote"), h("pre", { class: "raw" }, call.simulator_text)) : null,
    );
  }
  return h("div", { class: "call" }, head, jsonBlock(call.response as Json, new Set(), call.source));
}

function episodeDetail(episode: EpisodeView): HTMLElement {
  const request = episode.messages.find((m) => m.role === "user");
  return h(
    "div",
    { id: "episode-detail", class: "episode" },
    h(
      "div",
      { class: "episode-head" },
      h("h3", {}, `Step ${episode.step} · episode ${episode.episode_idx} · ${episode.task_id}`),
      h("span", { class: "file" }, `mode ${episode.mode} · reward ${episode.reward === null ? "–" : episode.reward.toFixed(3)} · ${episode.end}`),
      episode.mask_reason ? h("div", { class: "message error" }, `masked: ${episode.mask_reason}`) : null,
    ),
    request ? h("div", { class: "turn" }, h("h4", {}, "Request"), h("pre", { class: "raw" }, request.content)) : null,
    ...episode.turns.map((turn) =>
      h(
        "div",
        { class: "turn", "data-turn": turn.turn_idx },
        h("h4", {}, `Turn ${turn.turn_idx + 1}${turn.finished ? "" : " (cut at the token limit)"}`),
        h("pre", { class: "raw assistant" }, turn.text || "(empty)"),
        ...turn.calls.map(callView),
      ),
    ),
  );
}

export class EpisodeViewer {
  private readonly runSelect = h("select", { id: "episode-run", "aria-label": "Run" });
  private readonly stepSelect = h("select", { id: "episode-step", "aria-label": "Step" });
  private readonly list = h("div", { id: "episode-list", class: "episode-list" });
  private readonly detail = h("div", { id: "episode-view", class: "episode-view" });
  private readonly message = h("div", { class: "message" });
  private episodes: EpisodeView[] = [];

  constructor(root: HTMLElement) {
    this.runSelect.addEventListener("change", () => void this.load(Number(this.runSelect.value), null));
    this.stepSelect.addEventListener("change", () => void this.load(Number(this.runSelect.value), Number(this.stepSelect.value)));
    root.replaceChildren(
      h("div", { class: "toolbar" }, h("label", {}, "Run ", this.runSelect), h("label", {}, "Step ", this.stepSelect)),
      this.message,
      h("div", { class: "episodes-body" }, this.list, this.detail),
    );
  }

  /** Refreshes the run list and shows `run` (default: the selected, else the newest). */
  async show(run: number | null = null): Promise<void> {
    const runs = await commands.listRuns();
    if (runs.status === "error") {
      this.message.replaceChildren(errorBox(runs.error));
      return;
    }
    const previous = run ?? (this.runSelect.value ? Number(this.runSelect.value) : null);
    this.runSelect.replaceChildren(...runs.data.map((r) => h("option", { value: r.id }, `${r.id} · ${r.name} (${r.status})`)));
    const chosen = runs.data.find((r) => r.id === previous) ?? runs.data[0];
    if (!chosen) {
      this.detail.replaceChildren(h("p", { class: "help" }, "No runs yet."));
      return;
    }
    this.runSelect.value = String(chosen.id);
    await this.load(chosen.id, null);
  }

  private async load(run: number, step: number | null): Promise<void> {
    const page = await commands.runEpisodes(run, step);
    if (page.status === "error") {
      this.message.replaceChildren(errorBox(page.error));
      return;
    }
    this.message.replaceChildren();
    this.stepSelect.replaceChildren(...page.data.steps.map((s) => h("option", { value: s }, String(s))));
    if (page.data.step !== null) this.stepSelect.value = String(page.data.step);
    this.episodes = page.data.episodes;
    if (this.episodes.length === 0) {
      this.list.replaceChildren();
      this.detail.replaceChildren(h("p", { class: "help" }, `Run ${run} has recorded no episodes yet.`));
      return;
    }
    this.list.replaceChildren(
      ...this.episodes.map((e, i) => {
        const rehearsed = e.turns.reduce((n, t) => n + t.calls.filter((c) => c.real !== null && c.source !== "real").length, 0);
        return h(
          "button",
          { class: "episode-item", "data-index": i, onclick: () => this.select(i) },
          h("strong", {}, `#${e.episode_idx} ${e.task_id}`),
          h("span", { class: "file" }, `reward ${e.reward === null ? "–" : e.reward.toFixed(2)} · ${e.turns.length} turns · ${rehearsed} rehearsed`),
        );
      }),
    );
    // Open the first episode with a rehearsed call, as that is what this view is for.
    const first = this.episodes.findIndex((e) => e.turns.some((t) => t.calls.some((c) => c.real !== null && c.source !== "real")));
    this.select(first >= 0 ? first : 0);
  }

  private select(index: number): void {
    const episode = this.episodes[index];
    if (!episode) return;
    for (const item of this.list.querySelectorAll(".episode-item")) item.classList.toggle("selected", item.getAttribute("data-index") === String(index));
    this.detail.replaceChildren(episodeDetail(episode));
  }
}
