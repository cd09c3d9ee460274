// Unit tests of the schema-to-form mapping, on the real config schema generated from Rust.

import { describe, expect, it } from "vitest";
import schema from "./generated/config-schema.json";
import {
  allFields,
  buildForm,
  fieldForIssue,
  parseInput,
  valueAt,
  type Field,
  type Json,
} from "./schemaForm";

const sections = buildForm(schema as unknown as { [key: string]: Json });
const fields = allFields(sections);
const field = (id: string): Field => {
  const found = fields.find((f) => f.id === id);
  if (!found) throw new Error(`no field ${id}`);
  return found;
};

describe("buildForm", () => {
  it("makes one section per top-level table, in file order", () => {
    expect(sections.map((s) => s.id)).toEqual([
      "run", "model", "backend", "env", "judge", "sft", "rl", "rehearsal", "eval", "init",
    ]);
    expect(sections.find((s) => s.id === "model")?.sections.map((s) => s.id)).toEqual(["model.tiny"]);
  });

  it("marks optional tables such as [env.external] and [judge.endpoint]", () => {
    const env = sections.find((s) => s.id === "env");
    const external = env?.sections.find((s) => s.id === "env.external");
    expect(external?.optional).toBe(true);
    expect(external?.fields.map((f) => f.id)).toContain("env.external.api_key_env");
  });

  it("uses selects with help text for enums", () => {
    const device = field("backend.device");
    expect(device.widget.kind).toBe("select");
    if (device.widget.kind !== "select") return;
    expect(device.widget.choices.map((c) => c.value)).toEqual(["auto", "cpu", "cuda", "wgpu"]);
    expect(device.widget.choices[2].help).toContain("cuda");
    expect(device.help).toBe("Compute device.");
  });

  it("uses sliders for bounded ranges and plain numbers otherwise", () => {
    expect(field("env.mix_ratio").widget).toEqual({ kind: "slider", min: 0, max: 1, step: 0.01, integer: false });
    expect(field("env.difficulty").widget).toEqual({ kind: "slider", min: 1, max: 5, step: 1, integer: true });
    const lr = field("rl.lr").widget;
    expect(lr.kind).toBe("number");
    if (lr.kind === "number") expect(lr.exclusiveMin).toBe(0);
  });

  it("uses checkboxes, multi-selects and path pickers where they fit", () => {
    expect(field("rl.divide_by_std").widget.kind).toBe("checkbox");
    const domains = field("env.domains").widget;
    expect(domains.kind).toBe("multiselect");
    if (domains.kind === "multiselect") {
      expect(domains.choices.map((c) => c.value)).toEqual(["retail", "airline", "functions"]);
    }
    expect(field("model.path").widget).toEqual({ kind: "path", pick: "file-or-folder" });
    expect(field("eval.data_dir").widget).toEqual({ kind: "path", pick: "folder" });
  });

  it("knows defaults and required keys", () => {
    expect(field("rl.group_size").defaultValue).toBe(4);
    expect(field("rl.kl_coef").defaultValue).toBe(0.0001);
    expect(field("run.name").required).toBe(true);
    expect(field("run.name").defaultValue).toBeUndefined();
    expect(field("run.seed").required).toBe(false);
  });
});

describe("issues and values", () => {
  it("attaches an issue to the field that owns its path", () => {
    expect(fieldForIssue(fields, "rl.micro_batch_size")?.id).toBe("rl.micro_batch_size");
    expect(fieldForIssue(fields, "env.domains[1]")?.id).toBe("env.domains");
    expect(fieldForIssue(fields, "rl.grup_size")).toBeUndefined();
    expect(fieldForIssue(fields, "")).toBeUndefined();
  });

  it("reads values by TOML path", () => {
    const values = { rl: { lr: 0.001 }, run: { name: "x" } };
    expect(valueAt(values, ["rl", "lr"])).toBe(0.001);
    expect(valueAt(values, ["rl", "group_size"])).toBeUndefined();
    expect(valueAt(null, ["rl"])).toBeUndefined();
  });

  it("parses what a person types", () => {
    const intWidget = field("rl.group_size").widget;
    expect(parseInput(intWidget, " 8 ")).toEqual({ value: 8 });
    expect(parseInput(intWidget, "2.5")).toEqual({ error: "2.5 is not a whole number" });
    expect(parseInput(field("rl.lr").widget, "1e-5")).toEqual({ value: 0.00001 });
    expect(parseInput(field("rl.lr").widget, "fast")).toEqual({ error: '"fast" is not a number' });
    expect(parseInput(field("rl.divide_by_std").widget, "true")).toEqual({ value: true });
    expect(parseInput(field("run.name").widget, "my-run")).toEqual({ value: "my-run" });
  });
});
