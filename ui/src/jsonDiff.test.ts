// Unit tests of the JSON leaf diff the episode viewer highlights.
import { describe, expect, it } from "vitest";
import { differingLeaves, jsonLines, leaves } from "./jsonDiff";

describe("jsonDiff", () => {
  it("lists leaves with paths", () => {
    expect([...leaves({ a: { b: [1, { c: null }] }, d: [], e: {} }).keys()]).toEqual(["a.b[0]", "a.b[1].c", "d", "e"]);
    expect([...leaves(3).keys()]).toEqual([""]);
  });

  it("finds changed, missing and extra leaves", () => {
    const rehearsed = { status: "ok", temp: 21, tags: ["a", "b"], extra: true };
    const real = { status: "ok", temp: 19.5, tags: ["a"], unit: "C" };
    expect([...differingLeaves(rehearsed, real)].sort()).toEqual(["extra", "tags[1]", "temp", "unit"]);
    expect(differingLeaves(real, real).size).toBe(0);
    expect([...differingLeaves({ error: "x" }, "plain text")]).toEqual(["error", ""]);
  });

  it("prints lines marking the changed leaves", () => {
    const value = { status: "ok", temp: 21, list: [1, 2] };
    const lines = jsonLines(value, new Set(["temp", "list[1]"]));
    expect(lines.map((l) => "  ".repeat(l.indent) + l.text).join("\n")).toBe(JSON.stringify(value, null, 2));
    expect(lines.filter((l) => l.changed).map((l) => l.path)).toEqual(["temp", "list[1]"]);
  });
});
