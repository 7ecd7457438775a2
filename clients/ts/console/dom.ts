// Small DOM helpers for the console: elements built from data, never from
// HTML strings, so nothing a model or a tool wrote can become markup.

/** Attributes of h(): strings are set as attributes, functions as listeners (onclick → click). */
export type Attrs = Record<string, string | boolean | undefined | ((ev: Event) => void)>;

/** A child of h(): a node, text, or nothing. */
export type Child = Node | string | false | null | undefined;

/** Creates an element with attributes and children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, value);
  }
  append(el, children);
  return el;
}

/** Appends children, skipping empty ones. */
export function append(el: Element, children: readonly Child[]): void {
  for (const c of children) {
    if (c === false || c === null || c === undefined) continue;
    el.append(c);
  }
}

/** The element with this id; throws when the page lacks it. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`console: the page has no #${id}`);
  return el as T;
}

/** A value shown as JSON, indented. */
export function json(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v), 2);
}
