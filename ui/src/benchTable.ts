// Pure: the public-benchmark score table of a run (one row per evaluated checkpoint; a column per
// BFCL category, τ²-bench domain and VitaBench domain with its headline metric; each family's
// mean and their overall mean, as the paper's table has them), and the reading of a stored task record for the
// drill-down (the prompt or conversation, the model's calls, what was expected).

import type { EvalSeries } from "./bindings";

/** A benchmark family of the table, with the metric that scores it. */
export interface Family {
  /** Column-group label. */
  label: string;
  /** Benchmark name prefix in the store, e.g. `bfcl_`. */
  prefix: string;
  /** The headline metric. */
  metric: string;
  /** Whether the family counts in the overall mean (the paper's: BFCL, τ², VitaBench). */
  overall: boolean;
}

export const FAMILIES: Family[] = [
  { label: "BFCL", prefix: "bfcl_", metric: "accuracy", overall: true },
  { label: "τ²-bench", prefix: "tau2_", metric: "pass^1", overall: true },
  // Pass@1 over k trials is the mean success rate, the paper's Avg@k.
  { label: "VitaBench", prefix: "vita_", metric: "pass@1", overall: true },
  // FinMCP-style tool-name F1 on OpenAI-format datasets, reported beside the others.
  { label: "Tool calls", prefix: "tools_", metric: "f1_macro", overall: false },
];

export interface ScoreColumn {
  /** Stored benchmark name, e.g. `bfcl_simple_python`. */
  benchmark: string;
  /** Its name within the family, e.g. `simple_python`. */
  label: string;
  family: string;
  /** One value per row of the table; null where it was not evaluated. */
  values: (number | null)[];
  /** Tasks behind each value. */
  nTasks: (number | null)[];
}

export interface ScoreTable {
  /** Checkpoint steps, ascending: the rows. */
  steps: number[];
  columns: ScoreColumn[];
  /** Per family, the mean of its columns evaluated at each row. */
  familyMeans: { family: string; values: (number | null)[] }[];
  /** The mean of the family means present at each row (the families that count overall). */
  overall: (number | null)[];
}

function mean(values: (number | null)[]): number | null {
  const present = values.filter((v): v is number => v !== null && Number.isFinite(v));
  return present.length === 0 ? null : present.reduce((a, b) => a + b, 0) / present.length;
}

/** The rehearsal setting of a column label (`airline@parallel:4` → `parallel:4`), or null. */
export function rehearsalOf(label: string): string | null {
  const at = label.indexOf("@");
  return at < 0 ? null : label.slice(at + 1);
}

/** The table of a run's public-benchmark results (category `all`, each family's metric). */
export function scoreTable(series: EvalSeries[]): ScoreTable {
  const picked: { family: Family; s: EvalSeries }[] = [];
  for (const s of series) {
    if (s.category !== "all") continue;
    const family = FAMILIES.find((f) => s.benchmark.startsWith(f.prefix) && s.metric === f.metric);
    if (family) picked.push({ family, s });
  }
  const steps = [...new Set(picked.flatMap(({ s }) => s.steps))].sort((a, b) => a - b);
  const columns: ScoreColumn[] = picked
    .map(({ family, s }) => ({
      benchmark: s.benchmark,
      label: s.benchmark.slice(family.prefix.length),
      family: family.label,
      values: steps.map((step) => {
        const at = s.steps.indexOf(step);
        return at < 0 ? null : s.values[at];
      }),
      nTasks: steps.map((step) => {
        const at = s.steps.indexOf(step);
        return at < 0 ? null : s.n_tasks[at];
      }),
    }))
    .sort((a, b) => FAMILIES.findIndex((f) => f.label === a.family) - FAMILIES.findIndex((f) => f.label === b.family) || a.label.localeCompare(b.label));
  // Scores with test-time rehearsal (`airline@parallel:4`) sit beside the plain ones; the
  // means are over the plain ones, as the paper's table is.
  const plain = columns.filter((c) => rehearsalOf(c.label) === null);
  const familyMeans = FAMILIES.filter((f) => columns.some((c) => c.family === f.label)).map((f) => ({
    family: f.label,
    values: steps.map((_, row) => mean(plain.filter((c) => c.family === f.label).map((c) => c.values[row]))),
  }));
  const counted = familyMeans.filter((m) => FAMILIES.find((f) => f.label === m.family)?.overall);
  const overall = steps.map((_, row) => mean(counted.map((m) => m.values[row])));
  return { steps, columns, familyMeans, overall };
}

/** A score as a percentage with one decimal, or a dash. */
export function percent(value: number | null): string {
  return value === null || !Number.isFinite(value) ? "–" : `${(100 * value).toFixed(1)}%`;
}

/** The table's curves over checkpoints: each column, then each family's mean and the overall. */
export function tableCurves(table: ScoreTable): { key: string; steps: number[]; values: (number | null)[] }[] {
  const curve = (key: string, values: (number | null)[]) => ({ key, steps: table.steps, values });
  return [
    ...table.columns.map((c) => curve(`${c.family}/${c.label}`, c.values)),
    ...table.familyMeans.map((m) => curve(`${m.family} mean`, m.values)),
    curve("overall", table.overall),
  ];
}

/** A column of the comparison of runs. */
export interface CompareColumn {
  family: string;
  label: string;
  benchmark: string;
}

/** A run's row in the comparison: its latest evaluated checkpoint's scores. */
export interface CompareRow {
  label: string;
  /** The checkpoint shown, or null when the run has no public-benchmark scores. */
  step: number | null;
  /** One per column; null where the run has no score at that checkpoint. */
  values: (number | null)[];
  /** One per family of the comparison. */
  familyMeans: (number | null)[];
  overall: number | null;
}

/** The public-benchmark table of several runs: a row per run at its latest evaluated
 * checkpoint, a column per benchmark any of them has, each family's mean and the overall. */
export function compareTable(runs: { label: string; series: EvalSeries[] }[]): { columns: CompareColumn[]; families: string[]; rows: CompareRow[] } {
  const tables = runs.map((r) => ({ label: r.label, table: scoreTable(r.series) }));
  const columns: CompareColumn[] = [];
  for (const { table } of tables) {
    for (const c of table.columns) {
      if (!columns.some((x) => x.benchmark === c.benchmark)) columns.push({ family: c.family, label: c.label, benchmark: c.benchmark });
    }
  }
  const order = (family: string) => FAMILIES.findIndex((f) => f.label === family);
  columns.sort((a, b) => order(a.family) - order(b.family) || a.label.localeCompare(b.label));
  const families = FAMILIES.map((f) => f.label).filter((f) => columns.some((c) => c.family === f));
  const rows = tables.map(({ label, table }) => {
    const last = table.steps.length - 1;
    const value = (benchmark: string) => {
      const column = table.columns.find((c) => c.benchmark === benchmark);
      return last < 0 || !column ? null : column.values[last];
    };
    return {
      label,
      step: last < 0 ? null : table.steps[last],
      values: columns.map((c) => value(c.benchmark)),
      familyMeans: families.map((f) => (last < 0 ? null : table.familyMeans.find((m) => m.family === f)?.values[last] ?? null)),
      overall: last < 0 ? null : table.overall[last],
    };
  });
  return { columns, families, rows };
}

/** One message of a drill-down. */
export interface ShownMessage {
  role: string;
  content: string;
}

/** What the drill-down shows of a stored task record. */
export interface TaskDetail {
  /** The prompt (BFCL) or the whole conversation (τ², VitaBench). */
  messages: ShownMessage[];
  /** The model's decoded calls or final text (BFCL), as JSON text. */
  output: string | null;
  /** The acceptable calls (BFCL), as JSON text; null where none are stored. */
  expected: string | null;
  /** Facts about the grade: how a conversation ended, the reward's components. */
  facts: [string, string][];
}

/** Reads a stored record (JSON text) of either benchmark; unknown shapes show their raw JSON. */
export function taskDetail(recordJson: string): TaskDetail {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(recordJson) as Record<string, unknown>;
  } catch {
    return { messages: [], output: recordJson, expected: null, facts: [["record", "not JSON"]] };
  }
  const messages = Array.isArray(record.messages)
    ? (record.messages as Record<string, unknown>[]).map((m) => ({ role: String(m.role ?? "?"), content: String(m.content ?? "") }))
    : [];
  const facts: [string, string][] = [];
  const termination = record.termination as { kind?: string; detail?: string } | undefined;
  if (termination?.kind) facts.push(["ended", termination.detail ? `${termination.kind}: ${termination.detail}` : termination.kind]);
  const report = record.report as Record<string, unknown> | undefined;
  if (report) {
    const db = report.db as { matched?: boolean } | null | undefined;
    if (db) facts.push(["database", db.matched ? "matches the gold actions' result" : "differs from the gold actions' result"]);
    const actions = (report.actions as { name: string; matched: boolean }[] | undefined) ?? [];
    if (actions.length > 0) facts.push(["gold actions", actions.map((a) => `${a.matched ? "✓" : "✗"} ${a.name}`).join(", ")]);
    const told = (report.communicate as { info: string; met: boolean }[] | undefined) ?? [];
    if (told.length > 0) facts.push(["told the user", told.map((c) => `${c.met ? "✓" : "✗"} ${c.info}`).join(", ")]);
  }
  const nl = (record.nl_assertions as { assertion: string; met: boolean }[] | undefined) ?? [];
  for (const v of nl) facts.push(["NL assertion", `${v.met ? "✓" : "✗"} ${v.assertion}`]);
  const rubrics = (record.rubrics as { rubric: string; met: boolean; justification?: string }[] | undefined) ?? [];
  for (const r of rubrics) facts.push(["rubric", `${r.met ? "✓" : "✗"} ${r.rubric}${r.justification ? ` (${r.justification})` : ""}`]);
  if (typeof record.unbuilt_calls === "number" && record.unbuilt_calls > 0) {
    facts.push(["tools not rebuilt", `${record.unbuilt_calls} call(s) answered "not rebuilt"`]);
  }
  // BFCL multi-turn: what each turn's calls were answered with.
  const execution = record.execution as string[][][] | undefined;
  if (Array.isArray(execution)) {
    execution.forEach((steps, turn) => {
      const results = (steps ?? []).flat();
      if (results.length > 0) facts.push([`turn ${turn + 1} results`, results.join(" | ")]);
    });
  }
  const notes = (record.private_notes as string[] | undefined) ?? [];
  notes.forEach((note, i) => facts.push([`rehearsal memory ${i + 1}`, note]));
  // The imagined attempts behind each memory, whole: every call with its imagined response.
  type Attempt = { calls: { name: string; arguments: string; response: string }[]; outcome: string };
  const imagined = (record.imagined_attempts as Attempt[][] | undefined) ?? [];
  imagined.forEach((attempts, i) =>
    attempts.forEach((attempt, k) => {
      const calls = attempt.calls.map((c) => `${c.name} ${c.arguments} → ${c.response}`);
      facts.push([`rehearsal ${i + 1}, attempt ${k + 1}`, [...calls, attempt.outcome].join(" ; ")]);
    }),
  );
  if (typeof record.masked === "string") facts.push(["masked", record.masked]);
  const json = (v: unknown) => JSON.stringify(v, null, 2);
  const isBfcl = "result" in record;
  return {
    messages,
    output: isBfcl ? (typeof record.result === "string" ? (record.result as string) : json(record.result)) : null,
    expected: isBfcl && record.expected !== undefined && record.expected !== null ? json(record.expected) : isBfcl ? "no call (irrelevance)" : null,
    facts,
  };
}
