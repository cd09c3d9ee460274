// The episode viewer: a run's episodes at one step, listed by GRPO group and shown turn by
// turn; each rehearsed call's answer beside the real environment's answer as a JSON diff
// (differing leaves highlighted), with its fidelity scores. A whole GRPO group opens with its
// rollouts side by side: reward, the advantage each role got in training (computed by the
// engine, as the step's loss did) and every call's rehearsed-vs-real diff.

import { commands, type CallView, type EpisodeView, type GroupView, type StudioError, type TurnView } from "./bindings";
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

function turnView(turn: TurnView): HTMLElement {
  return h(
    "div",
    { class: "turn", "data-turn": turn.turn_idx },
    h("h4", {}, `Turn ${turn.turn_idx + 1}${turn.finished ? "" : " (cut at the token limit)"}`),
    h("pre", { class: "raw assistant" }, turn.text || "(empty)"),
    ...turn.calls.map(callView),
  );
}

/** Calls of an episode answered by a simulator and replayed on the real environment. */
function rehearsedCalls(episode: EpisodeView): number {
  return episode.turns.reduce((n, t) => n + t.calls.filter((c) => c.real !== null && c.source !== "real").length, 0);
}

/** An advantage as a signed number, coloured by its sign; `–` for a role without samples. */
function advantage(value: number | null): HTMLElement {
  if (value === null) return h("span", { class: "advantage" }, "–");
  const sign = value > 0 ? "+" : value < 0 ? "−" : "±";
  return h("span", { class: `advantage ${value > 0 ? "adv-up" : value < 0 ? "adv-down" : ""}` }, `${sign}${Math.abs(value).toFixed(3)}`);
}

function baselineText(group: GroupView): string {
  const baseline = group.baseline === "pooled" ? "pooled baseline (both roles against one group mean)" : "role-wise baseline (act and rehearse each against their own group mean)";
  return `${baseline}, ${group.divide_by_std ? "divided by the group's standard deviation" : "not divided by the standard deviation"}`;
}

/** A GRPO group: a summary table, the shared request, and the rollouts side by side. */
function groupDetail(group: GroupView): HTMLElement {
  const first = group.members[0]?.episode;
  const request = first?.messages.find((m) => m.role === "user");
  return h(
    "div",
    { id: "group-detail", class: "episode", "data-members": group.members.length },
    h(
      "div",
      { class: "episode-head" },
      h("h3", {}, `GRPO group ${group.group} · step ${group.step}`),
      h("span", { class: "file" }, `${group.members.length} rollouts · advantages with the ${baselineText(group)}`),
    ),
    h(
      "table",
      { id: "group-table", class: "data-table" },
      h("tr", {}, h("th", {}, "rollout"), h("th", {}, "reward"), h("th", {}, "act advantage"), h("th", {}, "rehearse advantage"), h("th", {}, "rehearsed calls"), h("th", {}, "end")),
      ...group.members.map((m) =>
        h(
          "tr",
          { "data-episode": m.episode.episode_idx },
          h("td", {}, `#${m.episode.episode_idx}`),
          h("td", {}, m.episode.reward === null ? `masked: ${m.episode.mask_reason ?? ""}` : m.episode.reward.toFixed(3)),
          h("td", {}, advantage(m.act_advantage)),
          h("td", {}, advantage(m.rehearse_advantage)),
          h("td", {}, String(rehearsedCalls(m.episode))),
          h("td", {}, m.episode.end),
        ),
      ),
    ),
    request ? h("div", { class: "turn" }, h("h4", {}, "Request (shared by the group)"), h("pre", { class: "raw" }, request.content)) : null,
    h(
      "div",
      { class: "group-columns", style: `grid-template-columns: repeat(${Math.max(1, group.members.length)}, minmax(340px, 1fr))` },
      ...group.members.map((m) =>
        h(
          "div",
          { class: "group-rollout", "data-episode": m.episode.episode_idx },
          h(
            "div",
            { class: "rollout-head" },
            h("strong", {}, `#${m.episode.episode_idx}`),
            h("span", {}, `reward ${m.episode.reward === null ? "–" : m.episode.reward.toFixed(3)}`),
            h("span", {}, "act ", advantage(m.act_advantage)),
            h("span", {}, "rehearse ", advantage(m.rehearse_advantage)),
          ),
          h("div", { class: "file" }, `mode ${m.episode.mode} · ${m.episode.end}`),
          m.episode.mask_reason ? h("div", { class: "message error" }, `masked: ${m.episode.mask_reason}`) : null,
          ...m.episode.turns.map(turnView),
        ),
      ),
    ),
  );
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
    ...episode.turns.map(turnView),
  );
}

export class EpisodeViewer {
  private readonly runSelect = h("select", { id: "episode-run", "aria-label": "Run" });
  private readonly stepSelect = h("select", { id: "episode-step", "aria-label": "Step" });
  private readonly list = h("div", { id: "episode-list", class: "episode-list" });
  private readonly detail = h("div", { id: "episode-view", class: "episode-view" });
  private readonly message = h("div", { class: "message" });
  private episodes: EpisodeView[] = [];
  private run: number | null = null;
  private step: number | null = null;
  /** Counts the pages asked for, so that only the latest choice's page is shown. */
  private requested = 0;

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
    const request = ++this.requested;
    const page = await commands.runEpisodes(run, step);
    // A run or step chosen while this page was on its way wins, whichever answer comes last.
    if (request !== this.requested) return;
    if (page.status === "error") {
      this.message.replaceChildren(errorBox(page.error));
      return;
    }
    this.message.replaceChildren();
    this.stepSelect.replaceChildren(...page.data.steps.map((s) => h("option", { value: s }, String(s))));
    if (page.data.step !== null) this.stepSelect.value = String(page.data.step);
    this.episodes = page.data.episodes;
    this.run = run;
    this.step = page.data.step;
    if (this.episodes.length === 0) {
      this.list.replaceChildren();
      this.detail.replaceChildren(h("p", { class: "help" }, `Run ${run} has recorded no episodes yet.`));
      return;
    }
    // The episodes by GRPO group, in the order the groups first appear.
    const groups = [...new Set(this.episodes.map((e) => e.group))];
    this.list.replaceChildren(
      ...groups.map((group) => {
        const members = this.episodes.map((e, i) => [e, i] as const).filter(([e]) => e.group === group);
        const rewards = members.map(([e]) => (e.reward === null ? "–" : e.reward.toFixed(2))).join(" / ");
        return h(
          "div",
          { class: "group-item", "data-group": group },
          h(
            "div",
            { class: "group-item-head" },
            h("span", { class: "file", title: group }, `group ${group}`),
            h("button", { class: "group-open", "data-group": group, title: "Open the group's rollouts side by side", onclick: () => void this.openGroup(group) }, "Open group"),
          ),
          h("div", { class: "file" }, `${members.length} rollouts · rewards ${rewards}`),
          ...members.map(([e, i]) =>
            h(
              "button",
              { class: "episode-item", "data-index": i, onclick: () => this.select(i) },
              h("strong", {}, `#${e.episode_idx} ${e.task_id}`),
              h("span", { class: "file" }, `reward ${e.reward === null ? "–" : e.reward.toFixed(2)} · ${e.turns.length} turns · ${rehearsedCalls(e)} rehearsed`),
            ),
          ),
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
    for (const item of this.list.querySelectorAll(".group-item")) item.classList.remove("selected");
    this.detail.replaceChildren(episodeDetail(episode));
  }

  /** Opens GRPO group `group` of the shown step: its rollouts side by side with their advantages. */
  async openGroup(group: string): Promise<void> {
    if (this.run === null || this.step === null) return;
    const result = await commands.runGroup(this.run, this.step, group);
    if (result.status === "error") {
      this.message.replaceChildren(errorBox(result.error));
      return;
    }
    this.message.replaceChildren();
    for (const item of this.list.querySelectorAll(".episode-item")) item.classList.remove("selected");
    for (const item of this.list.querySelectorAll(".group-item")) item.classList.toggle("selected", item.getAttribute("data-group") === group);
    this.detail.replaceChildren(groupDetail(result.data));
  }
}
