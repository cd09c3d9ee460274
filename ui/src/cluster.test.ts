// Unit tests of the cluster import's summary line.
import { describe, expect, it } from "vitest";
import { importSummary } from "./cluster";

const report = { run: 3, name: "cluster-sample", source: "/runs/x", created: true, trajectories: 6, metrics: 40, skipped: [] };

describe("importSummary", () => {
  it("says what a first import added", () => {
    expect(importSummary(report)).toBe("Imported run 3 (cluster-sample) from /runs/x: 6 trajectories, 40 metric rows added.");
  });
  it("says a repeated import added nothing", () => {
    expect(importSummary({ ...report, created: false, trajectories: 0, metrics: 0 })).toBe(
      "Run 3 (cluster-sample) is up to date with /runs/x: nothing new to add.",
    );
  });
  it("counts what a growing folder added", () => {
    expect(importSummary({ ...report, created: false, trajectories: 1, metrics: 1 })).toBe(
      "Updated run 3 (cluster-sample) from /runs/x: 1 trajectory, 1 metric row added.",
    );
  });
});
