// Turns the experiment config's JSON Schema (generated from the Rust types) into form sections.
// Pure functions only: the DOM lives in editor.ts, so this mapping is unit-tested on its own.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Schema = { [key: string]: Json };

export interface Choice {
  value: string;
  help: string;
}

export type Widget =
  | { kind: "select"; choices: Choice[] }
  | { kind: "multiselect"; choices: Choice[] }
  | { kind: "slider"; min: number; max: number; step: number; integer: boolean }
  | { kind: "number"; min?: number; max?: number; exclusiveMin?: number; integer: boolean }
  | { kind: "checkbox" }
  | { kind: "text"; pattern?: string }
  | { kind: "path"; pick: "file" | "folder" | "file-or-folder" };

export interface Field {
  /** TOML path of the key, e.g. ["rl", "lr"]. */
  path: string[];
  /** Dotted form of `path`, as the validator reports it. */
  id: string;
  label: string;
  help: string;
  widget: Widget;
  /** The default applied when the key is absent; undefined when the key is required. */
  defaultValue: Json | undefined;
  /** The key must be present. */
  required: boolean;
}

export interface Section {
  path: string[];
  id: string;
  title: string;
  help: string;
  fields: Field[];
  sections: Section[];
  /** An optional table (e.g. [env.external]): absent until the person adds it. */
  optional: boolean;
}

/** Sliders are used for bounded ranges at most this wide (integers) or for [0, 1]-like floats. */
const MAX_SLIDER_INTEGER_SPAN = 64;

function asSchema(value: Json | undefined): Schema | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? value : undefined;
}

function resolve(root: Schema, schema: Schema): Schema {
  let current = schema;
  for (let depth = 0; depth < 16; depth++) {
    const ref = current["$ref"];
    if (typeof ref !== "string" || !ref.startsWith("#/")) return current;
    let target: Json | undefined = root;
    for (const part of ref.slice(2).split("/")) target = asSchema(target)?.[part];
    const next = asSchema(target);
    if (!next) return current;
    // Keep the referring schema's own description and default, as schemars puts them there.
    current = { ...next, ...withoutRef(current) };
  }
  return current;
}

function withoutRef(schema: Schema): Schema {
  const { $ref: _ignored, ...rest } = schema;
  return rest;
}

/** `Option<T>` is `anyOf: [T, {type: null}]`: returns T and whether null was allowed. */
function unwrapOptional(root: Schema, schema: Schema): { schema: Schema; optional: boolean } {
  const resolved = resolve(root, schema);
  const branches = resolved["anyOf"];
  if (Array.isArray(branches)) {
    const nonNull = branches
      .map((b) => asSchema(b))
      .filter((b): b is Schema => b !== undefined && b["type"] !== "null");
    if (nonNull.length === 1 && nonNull.length < branches.length) {
      const { anyOf: _a, ...outer } = resolved;
      return { schema: { ...resolve(root, nonNull[0]), ...outer }, optional: true };
    }
  }
  const type = resolved["type"];
  if (Array.isArray(type) && type.includes("null")) {
    const rest = type.filter((t) => t !== "null");
    return { schema: { ...resolved, type: rest.length === 1 ? rest[0] : rest }, optional: true };
  }
  return { schema: resolved, optional: false };
}

/** The allowed values of an enum-like schema, with their help texts. */
export function choicesOf(root: Schema, schema: Schema): Choice[] | undefined {
  const resolved = resolve(root, schema);
  const values = resolved["enum"];
  if (Array.isArray(values)) return values.map((v) => ({ value: String(v), help: "" }));
  for (const key of ["oneOf", "anyOf"]) {
    const branches = resolved[key];
    if (!Array.isArray(branches)) continue;
    const choices: Choice[] = [];
    for (const branch of branches) {
      const b = asSchema(branch);
      if (!b) return undefined;
      if (b["const"] !== undefined) {
        choices.push({ value: String(b["const"]), help: String(b["description"] ?? "") });
      } else if (Array.isArray(b["enum"])) {
        const help = String(b["description"] ?? "");
        for (const v of b["enum"]) choices.push({ value: String(v), help });
      } else {
        return undefined;
      }
    }
    if (choices.length > 0) return choices;
  }
  return undefined;
}

/** Doc comments wrap at 100 columns; the form shows them as one paragraph. */
function paragraph(text: string): string {
  return text.replace(/\s*\n\s*/g, " ").trim();
}

/** Path widgets for the keys that hold files or folders. */
const PATH_KEYS: Record<string, "file" | "folder" | "file-or-folder"> = {
  path: "file-or-folder",
  data_dir: "folder",
};

export function widgetFor(root: Schema, key: string, schema: Schema): Widget {
  const choices = choicesOf(root, schema);
  if (choices) return { kind: "select", choices };
  const type = schema["type"];
  if (type === "array") {
    const items = asSchema(schema["items"]);
    const itemChoices = items ? choicesOf(root, items) : undefined;
    if (itemChoices) return { kind: "multiselect", choices: itemChoices };
    return { kind: "text" };
  }
  if (type === "boolean") return { kind: "checkbox" };
  if (type === "integer" || type === "number") {
    const integer = type === "integer";
    const min = typeof schema["minimum"] === "number" ? schema["minimum"] : undefined;
    const max = typeof schema["maximum"] === "number" ? schema["maximum"] : undefined;
    const exclusiveMin =
      typeof schema["exclusiveMinimum"] === "number" ? schema["exclusiveMinimum"] : undefined;
    if (min !== undefined && max !== undefined) {
      const span = max - min;
      if (integer && span > 0 && span <= MAX_SLIDER_INTEGER_SPAN) {
        return { kind: "slider", min, max, step: 1, integer };
      }
      if (!integer && span > 0 && span <= 10 && exclusiveMin === undefined) {
        return { kind: "slider", min, max, step: span / 100, integer };
      }
    }
    return { kind: "number", min, max, exclusiveMin, integer };
  }
  if (type === "string" && key in PATH_KEYS) return { kind: "path", pick: PATH_KEYS[key] };
  const pattern = typeof schema["pattern"] === "string" ? schema["pattern"] : undefined;
  return { kind: "text", pattern };
}

function isTable(root: Schema, schema: Schema): boolean {
  const resolved = resolve(root, schema);
  return resolved["type"] === "object" && asSchema(resolved["properties"]) !== undefined;
}

function buildSection(
  root: Schema,
  path: string[],
  schema: Schema,
  help: string,
  optional: boolean,
): Section {
  const resolved = resolve(root, schema);
  const properties = asSchema(resolved["properties"]) ?? {};
  const required = new Set(
    Array.isArray(resolved["required"]) ? resolved["required"].map(String) : [],
  );
  const defaults = asSchema(resolved["default"]) ?? {};
  const section: Section = {
    path,
    id: path.join("."),
    title: path.length === 0 ? "Experiment" : `[${path.join(".")}]`,
    help,
    fields: [],
    sections: [],
    optional,
  };
  for (const [key, raw] of Object.entries(properties)) {
    const property = asSchema(raw);
    if (!property) continue;
    const { schema: inner, optional: innerOptional } = unwrapOptional(root, property);
    const description = String(property["description"] ?? inner["description"] ?? "");
    const childPath = [...path, key];
    if (isTable(root, inner)) {
      section.sections.push(buildSection(root, childPath, inner, paragraph(description), innerOptional));
      continue;
    }
    const defaultValue =
      property["default"] !== undefined ? property["default"] : (defaults[key] ?? undefined);
    section.fields.push({
      path: childPath,
      id: childPath.join("."),
      label: key,
      help: paragraph(description),
      widget: widgetFor(root, key, inner),
      defaultValue: innerOptional && defaultValue === undefined ? undefined : defaultValue,
      required: required.has(key),
    });
  }
  return section;
}

/** The form for the whole config: one section per top-level table. */
export function buildForm(schema: Schema): Section[] {
  return buildSection(schema, [], schema, "", false).sections;
}

/** Every field of a section tree, depth first. */
export function allFields(sections: Section[]): Field[] {
  return sections.flatMap((s) => [...s.fields, ...allFields(s.sections)]);
}

/** The value at `path` in the parsed TOML, or undefined. */
export function valueAt(values: Json, path: string[]): Json | undefined {
  let current: Json | undefined = values;
  for (const key of path) {
    const table = asSchema(current);
    if (!table || !(key in table)) return undefined;
    current = table[key];
  }
  return current;
}

/**
 * Which field an issue belongs to: the field whose id equals the issue's path, or that the path
 * starts with (`env.domains[1]` belongs to `env.domains`). Undefined for issues that no field owns.
 */
export function fieldForIssue(fields: Field[], issuePath: string): Field | undefined {
  let best: Field | undefined;
  for (const field of fields) {
    const owns =
      issuePath === field.id ||
      issuePath.startsWith(field.id + "[") ||
      issuePath.startsWith(field.id + ".");
    if (owns && (!best || field.id.length > best.id.length)) best = field;
  }
  return best;
}

/** Parses what a person typed into a field into the JSON value to store; an error message otherwise. */
export function parseInput(widget: Widget, raw: string): { value: Json } | { error: string } {
  switch (widget.kind) {
    case "number":
    case "slider": {
      const text = raw.trim();
      if (text === "") return { error: "enter a number" };
      const n = Number(text);
      if (!Number.isFinite(n)) return { error: `${JSON.stringify(raw)} is not a number` };
      if (widget.integer && !Number.isInteger(n)) return { error: `${text} is not a whole number` };
      return { value: n };
    }
    case "checkbox":
      return { value: raw === "true" };
    default:
      return { value: raw };
  }
}
