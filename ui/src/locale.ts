// Under LANG=C (or C.UTF-8) WebKitGTK reports `navigator.language` as "C", which Intl rejects
// ("invalid language tag"); uPlot builds a number format from it when its module loads, so the
// whole front end would fail to start. Imported before uPlot: replaces an invalid tag with en-US.

function validTag(tag: string | undefined): boolean {
  if (!tag) return false;
  try {
    new Intl.NumberFormat(tag);
    return true;
  } catch {
    return false;
  }
}

if (typeof navigator !== "undefined" && !validTag(navigator.language)) {
  Object.defineProperty(navigator, "language", { value: "en-US", configurable: true });
  Object.defineProperty(navigator, "languages", { value: ["en-US"], configurable: true });
}
