// The training view's drift alarm: whether the rehearsed world has drifted from the real one —
// its simulator erring far less often than the real environment on the same calls (it has
// become too easy), or, for LLM-judged runs, the rehearsed reward running ahead of the
// real-environment score — with the step it started, a chart of the signals with that step
// marked, and the rule in words. The rule itself is `driftAlarm` in chartData.ts.

import type { RunSetup, StudioError } from "./bindings";
import { DRIFT_KEYS, DRIFT_RULE, driftAlarm, formatValue, type DriftAlarm, type DriftHalf, type SeriesStore } from "./chartData";
import { ChartPanel } from "./charts";
import { h } from "./dom";

const ERROR_KEYS: string[] = [DRIFT_KEYS.rehearsedErrorRate, DRIFT_KEYS.realErrorRate];
const REWARD_KEYS: string[] = [DRIFT_KEYS.reward, DRIFT_KEYS.heldOutScore];
const LABELS: Record<string, string> = {
  [DRIFT_KEYS.rehearsedErrorRate]: "rehearsed error rate",
  [DRIFT_KEYS.realErrorRate]: "real error rate (same calls replayed)",
  [DRIFT_KEYS.reward]: "rehearsed reward (rl/reward)",
  [DRIFT_KEYS.heldOutScore]: "held-out score (real environment)",
};

function percent(value: number): string {
  return `${(100 * value).toFixed(value > 0 && value < 0.1 ? 1 : 0)}%`;
}

/** Whether the reward half applies to a run: an LLM judge scoring episodes in a world that is not (only) the real one. */
export function rewardHalfApplies(setup: RunSetup | null): boolean {
  return setup !== null && setup.judge === "llm" && setup.tool_response_mode !== "real";
}

/** The rule in words, as the note under the alarm states it. */
export function ruleText(): string {
  const r = DRIFT_RULE;
  return (
    `Rule (each figure a mean over the last ${r.window} steps with data): the alarm fires when the simulator answers at most ` +
    `${Math.round(100 * r.errorRatio)}% as many replayed calls with an error as the real environment does on the same calls, while the real ` +
    `error rate is at least ${percent(r.minRealErrorRate)}; for runs an LLM judge scores in a rehearsed or simulated world, also when rl/reward ` +
    `leads the held-out score (acted on the real environment) by ${r.rewardGap} more than at the run's first evaluation — with the rule judge ` +
    `every reward is judged against real facts, so only the error-rate half applies. It is dated by the first step of the period it has been on since.`
  );
}

export class DriftPanel {
  /** The alarm: its state, the halves, the rule. */
  readonly element: HTMLElement;
  /** The chart of the signals, for the chart grid. */
  readonly chartElement: HTMLElement;
  private readonly banner = h("div", { id: "drift-alarm", class: "drift-status", role: "status" });
  private readonly chart: ChartPanel;
  private readonly halves = h("span", { id: "drift-halves", class: "drift-halves" });
  private readonly rule = h("div", { class: "chart-note", id: "drift-rule" }, ruleText());
  private setup: RunSetup | null = null;
  private store: SeriesStore | null = null;

  constructor(onError: (error: StudioError) => void) {
    this.chart = new ChartPanel("drift", "Drift: rehearsed vs real", (what, detail) => onError({ what, detail, file: null, field: null }));
    this.chartElement = this.chart.element;
    this.element = h(
      "section",
      { class: "wide-panel", id: "drift-panel", "data-state": "none" },
      h("div", { class: "chart-head" }, h("h3", {}, "Drift alarm"), this.halves),
      this.banner,
      this.rule,
    );
  }

  /** The shown run's settings (which halves apply); null when unknown. */
  setSetup(setup: RunSetup | null): void {
    this.setup = setup;
    if (this.store) this.update(this.store);
  }

  /** Recomputes the alarm from the run's metrics and redraws. */
  update(store: SeriesStore): void {
    this.store = store;
    const rewardHalf = rewardHalfApplies(this.setup);
    const alarm = driftAlarm(store, rewardHalf);
    const keys = rewardHalf ? [...ERROR_KEYS, ...REWARD_KEYS] : ERROR_KEYS;
    const series = keys.flatMap((k) => store.get(k) ?? []);
    this.chart.setSeries(
      series,
      series.map((s) => LABELS[s.key] ?? s.key),
    );
    this.chart.setMarker(alarm.on ? alarm.since : null);
    this.show(alarm, rewardHalf);
  }

  private show(alarm: DriftAlarm, rewardHalf: boolean): void {
    const state = alarm.on ? "on" : alarm.errorRate || alarm.reward ? "ok" : "none";
    this.element.dataset.state = state;
    this.element.dataset.since = alarm.since === null ? "" : String(alarm.since);
    this.banner.className = `drift-status drift-${state}`;
    if (state === "none") {
      this.banner.textContent =
        "No drift figures yet: they come with RL steps whose calls a simulator answered and the real environment replayed (rehearse, mixed or external runs).";
    } else {
      // While the alarm is on it names the halves that fire; else the figures of both.
      const shown = (half: DriftHalf | null): half is DriftHalf => half !== null && (!alarm.on || half.on);
      const parts: string[] = [];
      if (shown(alarm.errorRate)) parts.push(this.errorText(alarm.errorRate, alarm.on));
      if (shown(alarm.reward)) parts.push(this.rewardText(alarm.reward, alarm.on));
      this.banner.replaceChildren(
        h("strong", {}, alarm.on ? `Drift alarm since step ${alarm.since}:` : "No drift:"),
        " ",
        h("ul", {}, ...parts.map((part) => h("li", {}, `${part}.`))),
      );
    }
    this.rule.hidden = state === "none";
    const judge = this.setup ? `judge ${this.setup.judge}, tool answers ${this.setup.tool_response_mode}` : "settings unknown";
    this.halves.textContent = `Error-rate half: ${this.halfState(alarm.errorRate)}. Reward half: ${rewardHalf ? this.halfState(alarm.reward) : "does not apply"} (${judge}).`;
  }

  private halfState(half: DriftHalf | null): string {
    if (!half) return "no data yet";
    if (half.on) return `on since step ${half.since}`;
    if (half.since !== null) return `off (was on from step ${half.since} to ${half.until})`;
    return "off";
  }

  private errorText(half: DriftHalf, on: boolean): string {
    const steps = half.averaged === 1 ? `step ${half.step}` : `the ${half.averaged} steps to step ${half.step}`;
    const figures = `the simulator answers ${percent(half.rehearsed)} of replayed calls with an error where the real environment errs on ${percent(half.real)} (${half.averaged === 1 ? "at" : "mean of"} ${steps})`;
    return on ? `${figures}: the rehearsed world has become too easy` : figures;
  }

  private rewardText(half: DriftHalf, on: boolean): string {
    const gap = half.rehearsed - half.real;
    const figures = `at the held-out evaluation of step ${half.step} the rehearsed reward ${formatValue(half.rehearsed)} (mean of ${half.averaged} step${half.averaged === 1 ? "" : "s"}) leads the real score ${formatValue(half.real)} by ${formatValue(gap)}`;
    const baseline = half.baseline ?? 0;
    return on ? `${figures}, ${formatValue(gap - baseline)} more than at the first evaluation (${formatValue(baseline)})` : figures;
  }
}
