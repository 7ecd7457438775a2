// How ChatItems (the reducer's view model) become cards on the screen. A
// card is rebuilt only when its item changed: the reducer returns a new
// object for a changed item and the same object otherwise.

import type { ChatItem } from "../src/reducer.js";
import { renderDetails } from "./details.js";
import { h } from "./dom.js";

/** What a card's buttons do. */
export interface ItemActions {
  /** Edit and resend a user message (a new branch beside it). */
  edit(item: Extract<ChatItem, { kind: "user" }>): void;
  /** Fork the session at an entry into a new session. */
  fork(entryId: string): void;
  /** Open the approval dialog of a waiting call again. */
  decide(toolCallId: string): void;
}

/** One card per item, keyed by item id. */
export class ItemList {
  readonly #root: HTMLElement;
  readonly #cards = new Map<string, { item: ChatItem; el: HTMLElement }>();
  readonly #actions: ItemActions;

  constructor(root: HTMLElement, actions: ItemActions) {
    this.#root = root;
    this.#actions = actions;
  }

  /** Shows items, rebuilding only the cards whose item changed. */
  render(items: readonly ChatItem[]): void {
    const nearBottom = this.#root.scrollHeight - this.#root.scrollTop - this.#root.clientHeight < 80;
    const els: HTMLElement[] = [];
    const live = new Set<string>();
    for (const item of items) {
      live.add(item.id);
      let card = this.#cards.get(item.id);
      if (!card || !sameItem(card.item, item)) {
        card = { item, el: this.#card(item) };
        this.#cards.set(item.id, card);
      }
      card.item = item;
      els.push(card.el);
    }
    for (const id of [...this.#cards.keys()]) if (!live.has(id)) this.#cards.delete(id);
    const current = [...this.#root.children];
    if (current.length !== els.length || current.some((el, i) => el !== els[i])) this.#root.replaceChildren(...els);
    if (nearBottom) this.#root.scrollTop = this.#root.scrollHeight;
  }

  #card(item: ChatItem): HTMLElement {
    const base = { "data-item-id": item.id, "data-kind": item.kind };
    switch (item.kind) {
      case "user":
        return h(
          "article",
          { ...base, class: "card user", "data-entry-id": item.entryId },
          h("div", { class: "who" }, "you"),
          h("div", { class: "text" }, item.text),
          item.entryId &&
            h(
              "div",
              { class: "actions" },
              h("button", { class: "link", "data-action": "edit", onclick: () => this.#actions.edit(item) }, "edit & resend"),
              h("button", { class: "link", "data-action": "fork", onclick: () => this.#actions.fork(item.entryId) }, "fork here"),
            ),
        );
      case "assistant":
        return h(
          "article",
          { ...base, class: `card assistant${item.isStreaming ? " streaming" : ""}${item.error ? " failed" : ""}`, "data-streaming": String(item.isStreaming) },
          h("div", { class: "who" }, "assistant", item.isStreaming && h("span", { class: "spinner", title: "streaming" })),
          item.thinking && h("details", { class: "thinking" }, h("summary", {}, "thinking"), h("div", { class: "text" }, item.thinking)),
          item.text ? h("div", { class: "text" }, item.text) : !item.isStreaming && !item.error && h("div", { class: "muted" }, "(calls tools)"),
          item.error && h("div", { class: "error" }, item.error),
          item.entryId && !item.isStreaming && h("div", { class: "actions" }, h("button", { class: "link", onclick: () => this.#actions.fork(item.entryId) }, "fork here")),
        );
      case "tool":
        return h(
          "article",
          { ...base, class: `card tool ${item.state}`, "data-tool-call-id": item.toolCallId, "data-state": item.state },
          h("div", { class: "who" }, "tool ", h("code", {}, item.label), h("span", { class: `badge ${item.state}` }, item.state)),
          item.state === "running" && item.progress && h("pre", { class: "progress" }, item.progress),
          item.output && h("details", { class: "output", open: item.state === "error" }, h("summary", {}, "result"), h("pre", {}, item.output)),
          renderDetails(item.details),
        );
      case "approval":
        return h(
          "article",
          { ...base, class: `card approval ${item.decision}`, "data-tool-call-id": item.toolCallId, "data-decision": item.decision },
          h("div", { class: "who" }, "approval ", h("code", {}, item.label)),
          h(
            "div",
            { class: "text" },
            item.decision === "pending" ? "waiting for a decision" : `${item.decision.replace("_", " ")}${item.decidedBy ? ` by ${item.decidedBy}` : ""}${item.reason ? `: ${item.reason}` : ""}`,
          ),
          item.decision === "pending" && h("div", { class: "actions" }, h("button", { onclick: () => this.#actions.decide(item.toolCallId) }, "decide…")),
        );
      case "compaction":
        return h(
          "article",
          { ...base, class: `card compaction ${item.state}` },
          h("div", { class: "who" }, `earlier conversation summarized (${item.reason})`),
          h("div", { class: "text" }, item.state === "running" ? "summarizing…" : item.error || `${item.tokensBefore} → ${item.tokensAfter} tokens`),
          item.summary && h("details", {}, h("summary", {}, "summary"), h("div", { class: "text" }, item.summary)),
        );
      case "hook":
        return h(
          "article",
          { ...base, class: "card hook" },
          h("div", { class: "who" }, `hook ${item.hook}`),
          h("div", { class: "text" }, `${item.action.replaceAll("_", " ")}${item.toolName ? ` (${item.toolName})` : ""}${item.reason ? `: ${item.reason}` : ""}`),
        );
    }
  }
}

// sameItem is true when two items would draw the same card: a transcript
// read again gives new objects for unchanged items, and redrawing them
// would flicker and lose a click in progress.
function sameItem(a: ChatItem, b: ChatItem): boolean {
  if (a === b) return true;
  const ka = Object.keys(a) as (keyof ChatItem)[];
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => {
    const va: unknown = a[k];
    const vb: unknown = b[k];
    return va === vb || (typeof va === "object" && typeof vb === "object" && JSON.stringify(va) === JSON.stringify(vb));
  });
}
