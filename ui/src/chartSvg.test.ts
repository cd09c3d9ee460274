// Unit tests of the SVG chart export: round-number ticks, XML escaping, and a document that
// draws each series inside the plot area with its legend, bands and a marked step.
import { describe, expect, it } from "vitest";
import { chartSvg, escapeXml, niceTicks } from "./chartSvg";

describe("niceTicks", () => {
  it("picks 1, 2 or 5 times a power of ten inside the range", () => {
    expect(niceTicks(0, 10, 5)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(niceTicks(0.13, 0.61, 4)).toEqual([0.2, 0.4, 0.6]);
    expect(niceTicks(0.13, 0.61, 8)).toEqual([0.2, 0.3, 0.4, 0.5, 0.6]);
    expect(niceTicks(-3, 3, 3)).toEqual([-2, 0, 2]);
    expect(niceTicks(800, 830, 3)).toEqual([800, 810, 820, 830]);
    expect(niceTicks(5, 5, 4)).toEqual([5]);
    expect(niceTicks(Number.NaN, 1, 4)).toEqual([]);
  });
});

describe("chartSvg", () => {
  const chart = {
    title: "Reward <per> role & \"more\"",
    xLabel: "step",
    labels: ["act/reward", "rehearse/reward"],
    colors: ["#1f6f5c", "#c2410c"],
    dashed: [false, true],
    data: [
      [0, 1, 2, 3],
      [0, 0.5, null, 1],
      [1, null, null, null],
    ] as [number[], ...(number | null)[][]],
    x: [0, 3] as [number, number],
    y: [0, 1] as [number, number],
    width: 300,
    height: 200,
    formatX: (v: number) => String(v),
    formatY: (v: number) => String(v),
  };

  it("escapes text and draws a line per series, a point for a lone value, and a legend", () => {
    const svg = chartSvg(chart);
    expect(svg.startsWith("<svg xmlns=\"http://www.w3.org/2000/svg\"")).toBe(true);
    expect(svg.endsWith("</svg>")).toBe(true);
    expect(svg).toContain(escapeXml(chart.title));
    expect(svg).not.toContain("<per>");
    // The first series skips its null and runs from (0, 0) to (3, 1): plot corners.
    expect(svg).toContain('<path class="series" d="M64 232L164 132L364 32"');
    expect(svg).toContain('<circle class="series" cx="64" cy="32"');
    expect(svg).toContain("stroke-dasharray=\"6 4\"");
    expect(svg).toContain(">act/reward</text>");
    expect(svg).toContain(">rehearse/reward</text>");
    expect(svg).not.toContain("NaN");
  });

  it("nests its elements properly", () => {
    // A small tag matcher: every element opened is closed in order (the webview's own XML
    // parser checks the exported file in the end-to-end test).
    const stack: string[] = [];
    for (const [, close, name, rest] of chartSvg(chart).matchAll(/<(\/?)([a-zA-Z]+)([^>]*)>/g)) {
      if (close) expect(stack.pop()).toBe(name);
      else if (!rest.endsWith("/")) stack.push(name);
    }
    expect(stack).toEqual([]);
  });

  it("shades a band between its edges and marks a step, leaving the edges out of the legend", () => {
    const svg = chartSvg({
      ...chart,
      labels: ["mean"],
      colors: ["#1f6f5c"],
      dashed: [false],
      data: [
        [0, 1, 2, 3],
        [0.5, 0.5, 0.5, 0.5],
        [0, 0, null, 0.25],
        [1, 1, null, 0.75],
      ],
      bands: [{ lower: 2, upper: 3, color: "#1f6f5c" }],
      marker: 1,
    });
    // Points 0 and 1 make one polygon (upper edge out, lower edge back); the lone point 3 none.
    expect(svg).toContain('<path class="band" d="M64 32L164 32L164 232L64 232Z" fill="#1f6f5c"');
    expect(svg.match(/class="band"/g)?.length).toBe(1);
    expect(svg).toContain('<line class="marker" x1="164" x2="164" y1="32" y2="232"');
    expect(svg.match(/<text x="30"/g)?.length).toBe(1);
  });
});
