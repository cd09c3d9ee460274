// JSON diff for the episode viewer, pure: which leaves of two JSON values differ (by path),
// and a pretty-printed line form of a value that marks those leaves.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A leaf's path: keys and indices from the root, joined as `a.b[2].c`. */
function child(path: string, key: string | number): string {
  return typeof key === "number" ? `${path}[${key}]` : path === "" ? key : `${path}.${key}`;
}

function isObject(v: Json | undefined): v is { [key: string]: Json } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Every leaf (scalar, empty array or empty object) of `value` with its path. */
export function leaves(value: Json, path = ""): Map<string, Json> {
  const out = new Map<string, Json>();
  const walk = (v: Json, p: string) => {
    if (Array.isArray(v) && v.length > 0) v.forEach((item, i) => walk(item, child(p, i)));
    else if (isObject(v) && Object.keys(v).length > 0) for (const [k, item] of Object.entries(v)) walk(item, child(p, k));
    else out.set(p, v);
  };
  walk(value, path);
  return out;
}

function sameLeaf(a: Json | undefined, b: Json | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Paths of the leaves that differ between `a` and `b`, or that only one of them has. */
export function differingLeaves(a: Json, b: Json): Set<string> {
  const la = leaves(a);
  const lb = leaves(b);
  const out = new Set<string>();
  for (const [p, v] of la) if (!lb.has(p) || !sameLeaf(v, lb.get(p))) out.add(p);
  for (const p of lb.keys()) if (!la.has(p)) out.add(p);
  return out;
}

/** One line of a pretty-printed JSON value. */
export interface JsonLine {
  indent: number;
  text: string;
  /** The leaf's path, for lines that hold a leaf. */
  path: string | null;
  /** Whether that leaf differs on the other side. */
  changed: boolean;
}

/** Pretty-prints `value` (two-space indents) as lines, marking the leaves in `changed`. */
export function jsonLines(value: Json, changed: ReadonlySet<string>): JsonLine[] {
  const lines: JsonLine[] = [];
  const walk = (v: Json, p: string, indent: number, prefix: string, comma: string) => {
    const open = Array.isArray(v) ? "[" : "{";
    const close = Array.isArray(v) ? "]" : "}";
    const entries: [string | number, Json][] = Array.isArray(v) ? v.map((x, i) => [i, x]) : isObject(v) ? Object.entries(v) : [];
    if ((Array.isArray(v) || isObject(v)) && entries.length > 0) {
      lines.push({ indent, text: `${prefix}${open}`, path: null, changed: false });
      entries.forEach(([k, item], i) => {
        const keyText = typeof k === "number" ? "" : `${JSON.stringify(k)}: `;
        walk(item, child(p, k), indent + 1, keyText, i < entries.length - 1 ? "," : "");
      });
      lines.push({ indent, text: `${close}${comma}`, path: null, changed: false });
    } else {
      lines.push({ indent, text: `${prefix}${JSON.stringify(v)}${comma}`, path: p, changed: changed.has(p) });
    }
  };
  walk(value, "", 0, "", "");
  return lines;
}
