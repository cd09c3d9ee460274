// Vite build of the studio's front end; the Tauri host embeds dist/.
import { defineConfig } from "vitest/config";

export default defineConfig({
  clearScreen: false,
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
  },
  test: {
    include: ["src/**/*.test.ts"],
  },
});
