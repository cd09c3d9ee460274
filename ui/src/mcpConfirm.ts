// The question asked before a job starts MCP servers as programs on this computer: each exact
// command line is shown, and only a click on "Run these commands" confirms them (recorded by the
// host, so the same command line is not asked about again).

import type { PendingMcpServer } from "./bindings";
import { h } from "./dom";

/** Shows `servers` in a modal dialog; resolves true when the user confirms them all. */
export function askToRunMcpServers(servers: PendingMcpServer[]): Promise<boolean> {
  document.getElementById("mcp-confirm")?.remove();
  return new Promise((resolve) => {
    const dialog = h(
      "dialog",
      { id: "mcp-confirm", class: "mcp-confirm", "aria-labelledby": "mcp-confirm-title" },
      h("h3", { id: "mcp-confirm-title" }, servers.length === 1 ? "Run this command?" : `Run these ${servers.length} commands?`),
      h(
        "p",
        {},
        "This experiment starts MCP servers as programs on this computer, with your permissions, whenever a job needs them. " +
          "Confirm only commands you trust; a changed command line is asked about again.",
      ),
      ...servers.map((server) =>
        h(
          "div",
          { class: "mcp-server", "data-field": server.field },
          h("div", { class: "mcp-where" }, `${server.field} · ${server.domain} domain`),
          h("pre", { class: "mcp-command" }, server.command_line),
        ),
      ),
      h(
        "div",
        { class: "mcp-actions" },
        h("button", { id: "mcp-confirm-cancel", type: "button", onclick: () => finish(false) }, "Cancel"),
        h("button", { id: "mcp-confirm-run", type: "button", onclick: () => finish(true) }, servers.length === 1 ? "Run this command" : "Run these commands"),
      ),
    );
    let done = false;
    const finish = (confirmed: boolean): void => {
      if (done) return;
      done = true;
      dialog.close();
      dialog.remove();
      resolve(confirmed);
    };
    // Escape closes a modal dialog: that is a "no".
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    (dialog.querySelector("#mcp-confirm-cancel") as HTMLButtonElement).focus();
  });
}
