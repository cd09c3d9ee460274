// Renders a line diff from the host (`DiffLine[]`): the changed lines, `+` added, `-` removed.
// Shared by the editor's diff against a preset and the run comparison's config diff.

import type { DiffLine } from "./bindings";
import { h } from "./dom";

/** The changed lines of `lines` under a title saying what was compared. */
export function renderDiff(lines: DiffLine[], changedTitle: string, sameTitle: string): HTMLElement[] {
  const changed = lines.filter((line) => line.kind !== "same");
  return [
    h("div", { class: "diff-title" }, changed.length ? changedTitle : sameTitle),
    ...changed.map((line) => h("div", { class: `diff-${line.kind}` }, `${line.kind === "added" ? "+" : "-"} ${line.text}`)),
  ];
}
