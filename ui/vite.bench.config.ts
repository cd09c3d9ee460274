// Vite build of the chart benchmark's page code (`cargo xtask bench chart`): one IIFE file that
// WebDriver injects into the studio's webview. Never part of the studio's bundle (`dist/`); the
// xtask passes `--outDir` (under `target/bench/`).
import { defineConfig } from "vite";

export default defineConfig({
  clearScreen: false,
  build: {
    outDir: "../target/bench/chart-ui",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    lib: {
      entry: "src/bench/chartBench.ts",
      name: "EnvaceChartBench",
      formats: ["iife"],
      fileName: () => "chart-bench.js",
    },
  },
});
