// How a tool result's details (structured data for the screen, never sent
// to the model) are drawn: a unified diff as coloured lines, a list of
// records as a table, a record as a two-column table, anything else as JSON.

import type { JsonValue } from "@bufbuild/protobuf";

import { h, json } from "./dom.js";

type JsonRecord = { [k: string]: JsonValue };

function isRecord(v: JsonValue | undefined): v is JsonRecord {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Renders details, or nothing when there are none. */
export function renderDetails(details: JsonValue | undefined): HTMLElement | undefined {
  if (details === undefined || details === null) return undefined;
  const box = h("div", { class: "details" });
  if (isRecord(details) && typeof details.diff === "string") {
    box.append(renderDiff(details.diff));
    const rest = Object.fromEntries(Object.entries(details).filter(([k]) => k !== "diff"));
    if (Object.keys(rest).length) box.append(recordTable(rest));
    return box;
  }
  if (Array.isArray(details) && details.length > 0 && details.every(isRecord)) {
    box.append(rowsTable(details));
    return box;
  }
  if (isRecord(details)) {
    box.append(recordTable(details));
    return box;
  }
  box.append(h("pre", {}, json(details)));
  return box;
}

/** A unified diff, one line per row, added and removed lines marked. */
export function renderDiff(diff: string): HTMLElement {
  const pre = h("pre", { class: "diff", "data-testid": "diff" });
  for (const line of diff.split("\n")) {
    const cls = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "ctx";
    pre.append(h("span", { class: cls }, line), "\n");
  }
  return pre;
}

function cell(v: JsonValue | undefined): string {
  if (v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function recordTable(rec: JsonRecord): HTMLElement {
  return h("table", { class: "kv" }, ...Object.entries(rec).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, cell(v)))));
}

function rowsTable(rows: JsonRecord[]): HTMLElement {
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  return h(
    "table",
    { class: "rows" },
    h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", {}, c)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...cols.map((c) => h("td", {}, cell(r[c])))))),
  );
}
