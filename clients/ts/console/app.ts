// agentd's web console: the session list (WatchSessions), one conversation
// drawn by the ChatItem reducer (Attach and WatchSession), approval dialogs,
// a composer that prompts, steers, queues follow-ups and aborts, the branch
// tree, the inbox of everything waiting across the tenant's sessions
// (WatchPendingInteractions), and what the model sees (GetContext). It is
// an ordinary client of the AgentService over Connect: it can do nothing a
// token's tenant could not do from any language.

import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import type { Entry } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import { ApprovalScope } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import type { AgentEvent, ApprovalRequested } from "../../../gen/ts/agentd/v1/events_pb.js";
import type { GetContextResponse, TreeNode } from "../../../gen/ts/agentd/v1/service_pb.js";
import { SessionConfigSchema, SessionState, type Session } from "../../../gen/ts/agentd/v1/session_pb.js";
import { PendingInteractionKind, type PendingInteraction } from "../../../gen/ts/agentd/v1/watch_pb.js";
import { refusalOf, type AgentdClient, type ApprovalScopeName } from "../src/client.js";
import { applyEvent, emptyUi, itemsFromTranscript, setDraft, textOf, type ChatItem, type Conversation } from "../src/reducer.js";
import { connectWeb } from "../src/web.js";
import { byId, h, json } from "./dom.js";
import { ItemList } from "./items.js";

const tokenKey = "agentd-console-token";

/** The conversation open on the screen. */
interface Open {
  readonly id: string;
  session: Session | undefined;
  /** The stored path, root first, as last read. */
  entries: Entry[];
  conv: Conversation;
  /** The run streaming now, or "". */
  activeRun: string;
  /** The events of activeRun so far, replayed over a re-read transcript. */
  runEvents: AgentEvent[];
  /** The highest seq applied per run: two streams may carry one event. */
  lastSeq: Map<string, bigint>;
  /** The run followed with Attach (it started before the watch did): the watch's copy of its events is not complete. */
  attachedRun: string;
  /** Approval requests by tool call id, for the dialog. */
  requests: Map<string, ApprovalRequested>;
  /** Approvals whose dialog the user put off. */
  later: Set<string>;
  /** Edit and resend: the parent of the user message being replaced; undefined when not editing. */
  editParent: string | undefined;
  tree: { nodes: TreeNode[]; leafEntryId: string } | undefined;
  context: GetContextResponse | undefined;
  /** Counts reload() calls; only the latest one's result is shown. */
  reloads: number;
  /** Ends this conversation's streams when another is opened. */
  readonly stop: AbortController;
}

/** The console's state; one per page. */
class Console {
  client: AgentdClient;
  readonly sessions = new Map<string, Session>();
  readonly pending = new Map<string, PendingInteraction>();
  open: Open | undefined;
  readonly items: ItemList;
  #frame = 0;
  readonly #stop = new AbortController();
  /** Bumped when sessions or pending change, so their lists are rebuilt only then. */
  #sessionsVersion = 0;
  #pendingVersion = 0;
  /** What each panel was last drawn from: a panel is rebuilt only when it changed, so a click is never lost to a redraw. */
  readonly #drawn = { sessions: -1, pending: -1, tree: undefined as unknown, context: undefined as unknown, open: undefined as Open | undefined };

  constructor() {
    this.client = connectWeb({ token: sessionStorage.getItem(tokenKey) ?? undefined });
    this.items = new ItemList(byId("items"), {
      edit: (item) => this.startEdit(item),
      fork: (entryId) => void this.fork(entryId),
      decide: (toolCallId) => {
        this.open?.later.delete(toolCallId);
        this.render();
      },
    });
  }

  /** Starts the watches and opens the session named in the URL. */
  start(): void {
    this.wire();
    void this.watchSessions();
    void this.watchInbox();
    const id = new URLSearchParams(location.hash.slice(1)).get("session");
    if (id) void this.openSession(id);
    this.render();
  }

  // ---- the session list ----

  async watchSessions(): Promise<void> {
    let cursor = "";
    for (let attempt = 0; !this.#stop.signal.aborted; attempt++) {
      try {
        for await (const ev of this.client.rpc.watchSessions({ cursor }, { signal: this.#stop.signal })) {
          attempt = 0;
          const c = ev.change;
          if (c.case !== "resync") cursor = ev.cursor;
          switch (c.case) {
            case "started":
              await this.listSessions();
              break;
            case "created":
            case "updated":
              this.sessions.set(c.value.id, c.value);
              break;
            case "runState": {
              const s = this.sessions.get(ev.sessionId);
              if (s) this.sessions.set(ev.sessionId, { ...s, state: c.value.state, activeRunId: c.value.state === SessionState.RUNNING ? c.value.runId : "" });
              break;
            }
            case "deleted":
              this.sessions.delete(ev.sessionId);
              break;
            case "resync":
              // Read the list again, then watch from the resync's cursor.
              cursor = c.value.cursor;
              break;
          }
          this.changed("sessions");
          this.render();
        }
      } catch (err) {
        if (this.#stop.signal.aborted) return;
        if (this.needsToken(err)) return;
        this.status(`session list: ${message(err)}; retrying`);
      }
      await sleep(Math.min(5000, 250 * 2 ** attempt));
    }
  }

  async listSessions(): Promise<void> {
    let pageToken = "";
    do {
      const res = await this.client.rpc.listSessions({ pageSize: 100, pageToken });
      for (const s of res.sessions) this.sessions.set(s.id, s);
      pageToken = res.nextPageToken;
    } while (pageToken);
  }

  // ---- the inbox: everything waiting across the tenant's sessions ----

  async watchInbox(): Promise<void> {
    for (let attempt = 0; !this.#stop.signal.aborted; attempt++) {
      try {
        const list = await this.client.rpc.listPendingInteractions({});
        this.pending.clear();
        for (const p of list.interactions) this.pending.set(pendingKey(p), p);
        this.changed("pending");
        this.render();
        for await (const ev of this.client.rpc.watchPendingInteractions({ cursor: list.cursor }, { signal: this.#stop.signal })) {
          attempt = 0;
          const c = ev.change;
          if (c.case === "added") this.pending.set(pendingKey(c.value), c.value);
          else if (c.case === "removed") this.pending.delete(pendingKey(c.value));
          else if (c.case === "resync") break; // list again
          this.changed("pending");
          this.render();
        }
      } catch (err) {
        if (this.#stop.signal.aborted) return;
        if (this.needsToken(err)) return;
        this.status(`inbox: ${message(err)}; retrying`);
      }
      await sleep(Math.min(5000, 250 * 2 ** attempt));
    }
  }

  // ---- one conversation ----

  async openSession(id: string): Promise<void> {
    this.open?.stop.abort();
    const o: Open = {
      id,
      session: this.sessions.get(id),
      entries: [],
      conv: { transcript: [], chat: { items: [], streamingId: "", openId: "" }, ui: emptyUi },
      activeRun: "",
      runEvents: [],
      lastSeq: new Map(),
      attachedRun: "",
      requests: new Map(),
      later: new Set(),
      editParent: undefined,
      tree: undefined,
      context: undefined,
      reloads: 0,
      stop: new AbortController(),
    };
    this.open = o;
    history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
    this.render();
    void this.watchSession(o);
  }

  /**
   * Watches the open session: once the watch is live, reads the session
   * and its path, and follows a run that was already streaming with Attach
   * from its first event (a reload mid-run shows all of it again).
   */
  async watchSession(o: Open): Promise<void> {
    let cursor = "";
    for (let attempt = 0; !o.stop.signal.aborted; attempt++) {
      try {
        for await (const ev of this.client.rpc.watchSession({ sessionId: o.id, cursor }, { signal: o.stop.signal })) {
          attempt = 0;
          const c = ev.change;
          if (c.case !== "resync") cursor = ev.cursor;
          switch (c.case) {
            case "started":
              await this.load(o);
              break;
            case "runStarted":
              break; // its agent_start follows as an event
            case "event":
              if (c.value.runId !== o.attachedRun) this.apply(o, c.value);
              break;
            case "runEnded":
              break; // handled at its agent_end
            case "sessionUpdated":
              o.session = c.value;
              if (!o.activeRun) void this.reload(o);
              break;
            case "entriesAppended":
              if (!o.activeRun) void this.reload(o);
              break;
            case "labelChanged":
              void this.loadTree(o);
              break;
            case "deleted":
              this.status(`session ${o.id} was deleted`);
              o.stop.abort();
              this.open = undefined;
              history.replaceState(null, "", "#");
              break;
            case "resync":
              cursor = c.value.cursor;
              await this.load(o);
              break;
          }
          this.render();
        }
      } catch (err) {
        if (o.stop.signal.aborted) return;
        if (this.needsToken(err)) return;
        const r = refusalOf(err);
        if (r?.code === Code.NotFound) {
          this.status(`session ${o.id}: not found`);
          this.open = undefined;
          this.render();
          return;
        }
        this.status(`session ${o.id}: ${message(err)}; retrying`);
      }
      await sleep(Math.min(5000, 250 * 2 ** attempt));
    }
  }

  /** Reads the session and its path and, when a run streams, follows it from its start. */
  async load(o: Open): Promise<void> {
    const res = await this.client.rpc.getSession({ sessionId: o.id });
    o.session = res.session;
    const active = o.session?.state === SessionState.RUNNING ? o.session.activeRunId : "";
    if (active && active !== o.attachedRun && !o.lastSeq.has(active)) {
      o.activeRun = active;
      o.attachedRun = active;
      o.runEvents = [];
      void this.follow(o, this.client.attach(o.id, { runId: active, afterSeq: 0n, signal: o.stop.signal }));
    }
    await this.reload(o);
  }

  /** Reads the path again and rebuilds the items: the stored entries, then the active run's events over them. */
  async reload(o: Open): Promise<void> {
    // Reloads may overlap (a run's end, Navigate, the watch): the one
    // started last wins, so an older read never replaces a newer one.
    const gen = ++o.reloads;
    const entries = await this.client.transcript(o.id);
    if (o !== this.open || gen !== o.reloads) return;
    o.entries = entries;
    const base = entries.filter((e) => !o.activeRun || e.runId !== o.activeRun);
    let conv: Conversation = {
      transcript: base.flatMap((e) => (e.payload.case === "message" ? [e.payload.value] : [])),
      chat: { items: itemsFromTranscript(base), streamingId: "", openId: "" },
      ui: o.conv.ui,
    };
    for (const ev of o.runEvents) conv = applyEvent(conv, ev);
    o.conv = conv;
    this.render();
    void this.loadContext(o);
    void this.loadTree(o);
  }

  /** Applies the events of a stream (Prompt, Attach), resuming it after a drop. */
  async follow(o: Open, stream: AsyncIterable<AgentEvent>): Promise<void> {
    try {
      for await (const ev of this.client.resume(o.id, stream)) this.apply(o, ev);
    } catch (err) {
      if (o.stop.signal.aborted) return;
      this.status(describeError(err));
    }
  }

  /** Applies one event once, whichever stream brought it first. */
  apply(o: Open, ev: AgentEvent): void {
    if (o !== this.open) return;
    if (ev.seq <= (o.lastSeq.get(ev.runId) ?? 0n)) return;
    o.lastSeq.set(ev.runId, ev.seq);
    const e = ev.event;
    if (e.case === "agentStart") {
      o.activeRun = ev.runId;
      o.runEvents = [];
    }
    if (ev.runId === o.activeRun) o.runEvents.push(ev);
    o.conv = applyEvent(o.conv, ev);
    if (e.case === "approvalRequested") o.requests.set(e.value.toolCallId, e.value);
    if (e.case === "agentEnd" && ev.runId === o.activeRun) {
      o.activeRun = "";
      o.runEvents = [];
      o.attachedRun = "";
      void this.reload(o);
    }
    this.schedule();
  }

  async loadContext(o: Open): Promise<void> {
    try {
      o.context = await this.client.contextReport(o.id);
    } catch (err) {
      this.status(`what the model sees: ${describeError(err)}`);
    }
    this.schedule();
  }

  async loadTree(o: Open): Promise<void> {
    try {
      o.tree = await this.client.tree(o.id);
    } catch (err) {
      this.status(`tree: ${describeError(err)}`);
    }
    this.schedule();
  }

  // ---- actions ----

  async send(kind: "prompt" | "steer" | "followUp"): Promise<void> {
    const o = this.open;
    if (!o) return;
    const text = o.conv.ui.draft.trim();
    if (!text) return;
    o.conv = { ...o.conv, ui: setDraft(o.conv.ui, "") };
    byId<HTMLTextAreaElement>("draft").value = "";
    this.render();
    try {
      if (kind === "steer") await this.client.steer(o.id, text);
      else if (kind === "followUp") await this.client.followUp(o.id, text);
      else {
        const parent = o.editParent;
        o.editParent = undefined;
        // Detached: a reload or a closed tab leaves the run going; the
        // next page load follows it again.
        const stream =
          parent === undefined ? this.client.prompt(o.id, text, { detach: true, signal: o.stop.signal }) : this.client.editAndResend(o.id, parent, text, { detach: true, signal: o.stop.signal });
        await this.follow(o, stream);
      }
    } catch (err) {
      // Nothing was sent: give the text back.
      o.conv = { ...o.conv, ui: setDraft(o.conv.ui, text) };
      byId<HTMLTextAreaElement>("draft").value = text;
      this.status(describeError(err));
    }
    this.render();
  }

  async abort(): Promise<void> {
    const o = this.open;
    if (!o?.activeRun) return;
    try {
      await this.client.abort(o.id, o.activeRun);
    } catch (err) {
      this.status(describeError(err));
    }
  }

  startEdit(item: Extract<ChatItem, { kind: "user" }>): void {
    const o = this.open;
    if (!o) return;
    const entry = o.entries.find((e) => e.id === item.entryId);
    if (!entry) return;
    o.editParent = entry.parentId;
    o.conv = { ...o.conv, ui: setDraft(o.conv.ui, item.text) };
    const draft = byId<HTMLTextAreaElement>("draft");
    draft.value = item.text;
    draft.focus();
    this.render();
  }

  async fork(entryId: string): Promise<void> {
    const o = this.open;
    if (!o) return;
    try {
      const s = await this.client.fork(o.id, entryId, { title: `${o.session?.title || o.id} (fork)` });
      this.sessions.set(s.id, s);
      this.changed("sessions");
      await this.openSession(s.id);
    } catch (err) {
      this.status(describeError(err));
    }
  }

  async navigate(entryId: string): Promise<void> {
    const o = this.open;
    if (!o) return;
    try {
      await this.client.navigate(o.id, entryId);
      await this.reload(o);
    } catch (err) {
      this.status(describeError(err));
    }
  }

  async resolve(sessionId: string, req: ApprovalRequested, allow: boolean, scope: ApprovalScopeName, suggested: boolean, reason: string): Promise<void> {
    try {
      if (allow) await this.client.approve(sessionId, req, { scope, reason, decidedBy: "console", ...(suggested ? { rule: "suggested" as const } : {}) });
      else await this.client.deny(sessionId, req, { scope, reason: reason || "denied in the console", decidedBy: "console", ...(suggested ? { rule: "suggested" as const } : {}) });
    } catch (err) {
      this.status(describeError(err));
    }
  }

  async createSession(): Promise<void> {
    const title = byId<HTMLInputElement>("new-title").value.trim();
    const raw = byId<HTMLTextAreaElement>("new-config").value.trim();
    try {
      const config = fromJson(SessionConfigSchema, raw ? (JSON.parse(raw) as JsonObject) : { faux: { echo: true } });
      const s = await this.client.createSession(config, { title });
      this.sessions.set(s.id, s);
      this.changed("sessions");
      byId<HTMLDialogElement>("new-dialog").close();
      await this.openSession(s.id);
    } catch (err) {
      byId("new-error").textContent = describeError(err);
    }
  }

  // ---- rendering ----

  schedule(): void {
    if (this.#frame) return;
    this.#frame = requestAnimationFrame(() => {
      this.#frame = 0;
      this.render();
    });
  }

  render(): void {
    const opened = this.#drawn.open !== this.open;
    this.#drawn.open = this.open;
    if (opened || this.#drawn.sessions !== this.#sessionsVersion) {
      this.#drawn.sessions = this.#sessionsVersion;
      this.renderSessions();
    }
    if (this.#drawn.pending !== this.#pendingVersion) {
      this.#drawn.pending = this.#pendingVersion;
      this.renderInbox();
    }
    const o = this.open;
    byId("conversation").hidden = !o;
    byId("empty").hidden = !!o;
    if (!o) return;
    const s = o.session;
    byId("session-title").textContent = s?.title || o.id;
    const model = s?.config?.model;
    byId("session-meta").textContent = `${o.id} · ${model?.id ? `${model.provider}/${model.id}` : "faux model"}`;
    this.items.render(o.conv.chat.items);
    const running = !!o.activeRun;
    byId("conversation").dataset.running = String(running);
    byId("send").hidden = running;
    for (const b of ["steer", "follow-up", "abort"]) byId(b).hidden = !running;
    const editing = byId("editing");
    editing.hidden = o.editParent === undefined;
    this.renderApproval(o);
    if (opened || this.#drawn.context !== o.context) {
      this.#drawn.context = o.context;
      this.renderContext(o);
    }
    if (opened || this.#drawn.tree !== o.tree) {
      this.#drawn.tree = o.tree;
      this.renderTree(o);
    }
  }

  /** Records a change of the session list or the inbox. */
  changed(what: "sessions" | "pending"): void {
    if (what === "sessions") this.#sessionsVersion++;
    else this.#pendingVersion++;
  }

  renderSessions(): void {
    const list = [...this.sessions.values()].sort((a, b) => Number((b.createTime?.seconds ?? 0n) - (a.createTime?.seconds ?? 0n)));
    byId("sessions").replaceChildren(
      ...list.map((s) =>
        h(
          "li",
          { "data-session-id": s.id, class: `${s.id === this.open?.id ? "current" : ""} ${s.state === SessionState.RUNNING ? "running" : ""}` },
          h("button", { class: "link", onclick: () => void this.openSession(s.id) }, s.title || s.id),
          s.state === SessionState.RUNNING && h("span", { class: "badge running" }, "running"),
        ),
      ),
    );
  }

  renderInbox(): void {
    const items = [...this.pending.values()];
    byId("inbox-count").textContent = String(items.length);
    byId("inbox").replaceChildren(
      ...items.map((p) => {
        const s = this.sessions.get(p.sessionId);
        const req = p.request?.event;
        const what =
          req?.case === "approvalRequested" ? `approve ${req.value.toolName}` : req?.case === "toolCallRequested" ? `run client tool ${req.value.toolName}` : req?.case === "hookRequested" ? `answer hook ${req.value.hook}` : "supply context";
        return h(
          "li",
          { "data-kind": PendingInteractionKind[p.kind].toLowerCase(), "data-session-id": p.sessionId },
          h("button", { class: "link", onclick: () => void this.openSession(p.sessionId) }, `${what} — ${s?.title || p.sessionId}`),
          req?.case === "approvalRequested" &&
            h(
              "span",
              { class: "quick" },
              h("button", { onclick: () => void this.resolve(p.sessionId, req.value, true, "call", false, "") }, "allow"),
              h("button", { onclick: () => void this.resolve(p.sessionId, req.value, false, "call", false, "") }, "deny"),
            ),
        );
      }),
    );
  }

  renderApproval(o: Open): void {
    const dialog = byId<HTMLDialogElement>("approval-dialog");
    const waiting = o.conv.chat.items.find((it) => it.kind === "approval" && it.decision === "pending" && o.requests.has(it.toolCallId) && !o.later.has(it.toolCallId));
    const req = waiting?.kind === "approval" ? o.requests.get(waiting.toolCallId) : undefined;
    if (!req) {
      if (dialog.open) dialog.close();
      return;
    }
    if (dialog.open && dialog.dataset.toolCallId === req.toolCallId) return;
    dialog.dataset.toolCallId = req.toolCallId;
    byId("approval-tool").textContent = req.toolName;
    const args = byId("approval-args");
    args.replaceChildren(...argumentsView(req.toolName, req.arguments ?? {}));
    const scopes = req.scopes.length ? req.scopes : [ApprovalScope.CALL];
    byId("approval-scopes").replaceChildren(
      ...scopes.map((sc, i) => {
        const name = scopeName(sc);
        return h(
          "label",
          {},
          h("input", { type: "radio", name: "scope", value: name, checked: i === 0, "data-scope": name }),
          ` ${name === "call" ? "this call" : name === "run" ? "this run" : "this session (kept as a rule)"}`,
        );
      }),
    );
    const rule = req.suggestedRule;
    byId("approval-rule").hidden = !rule;
    byId("approval-rule-text").textContent = rule ? ruleText(rule.toolName, rule.commandPrefix, rule.pathGlob) : "";
    byId<HTMLInputElement>("approval-suggested").checked = false;
    byId<HTMLInputElement>("approval-reason").value = "";
    byId("approval-deadline").textContent = req.deadline ? `decide before ${new Date(Number(req.deadline.seconds) * 1000).toLocaleTimeString()}` : "";
    if (!dialog.open) dialog.showModal();
  }

  renderContext(o: Open): void {
    const r = o.context;
    const panel = byId("context");
    if (!r?.context) {
      panel.replaceChildren(h("p", { class: "muted" }, "loading…"));
      return;
    }
    const c = r.context;
    panel.replaceChildren(
      h(
        "div",
        { class: "tokens", "data-testid": "context-tokens" },
        `${r.totalTokens} of ${r.contextWindow} tokens`,
        r.wouldCompact && h("span", { class: "badge" }, "compacts next"),
        h("meter", { min: "0", max: String(r.contextWindow), high: String(r.compactionThreshold), value: String(r.totalTokens) }),
      ),
      h("h3", {}, "system prompt"),
      h("pre", { class: "system", "data-testid": "context-system" }, c.systemPrompt || "(none)"),
      h("h3", {}, `messages (${c.messages.length})`),
      h(
        "ol",
        { class: "context-messages", "data-testid": "context-messages" },
        ...c.messages.map((m, i) => {
          const role = m.role.case ?? "unknown";
          let text = "";
          if (m.role.case === "user") text = textOf(m.role.value.content);
          else if (m.role.case === "assistant")
            text = m.role.value.content.map((b) => (b.block.case === "text" ? b.block.value.text : b.block.case === "toolCall" ? `→ ${b.block.value.name}(${JSON.stringify(b.block.value.arguments ?? {})})` : "")).join(" ");
          else if (m.role.case === "toolResult") text = `${m.role.value.toolName}: ${textOf(m.role.value.content)}`;
          return h("li", { "data-role": role }, h("span", { class: "role" }, role), h("span", { class: "tok" }, `${r.messageTokens[i] ?? 0n} tok`), h("div", { class: "text" }, text));
        }),
      ),
      h("h3", {}, `tools (${c.tools.length})`),
      h("ul", { class: "context-tools" }, ...c.tools.map((t) => h("li", {}, h("code", {}, t.name), " ", t.description))),
    );
  }

  renderTree(o: Open): void {
    const t = o.tree;
    const root = byId("tree");
    if (!t) {
      root.replaceChildren();
      return;
    }
    const children = new Map<string, TreeNode[]>();
    const byEntry = new Map<string, TreeNode>();
    for (const n of t.nodes) {
      byEntry.set(n.id, n);
      const list = children.get(n.parentId) ?? [];
      list.push(n);
      children.set(n.parentId, list);
    }
    const onPath = new Set<string>();
    for (let id = t.leafEntryId; id; id = byEntry.get(id)?.parentId ?? "") onPath.add(id);
    // Depth grows only where the conversation branches: a linear run of
    // entries stays in one list.
    const list = (first: TreeNode[]): HTMLElement => {
      const ul = h("ul", {});
      let level = first;
      while (level.length === 1) {
        ul.append(this.treeNode(level[0]!, onPath, t.leafEntryId));
        level = children.get(level[0]!.id) ?? [];
      }
      for (const n of level) {
        const li = h("li", { class: "branch" });
        li.append(list([n]));
        ul.append(li);
      }
      return ul;
    };
    root.replaceChildren(list(children.get("") ?? []));
  }

  treeNode(n: TreeNode, onPath: Set<string>, leaf: string): HTMLElement {
    return h(
      "li",
      { class: `node${onPath.has(n.id) ? " on-path" : ""}${n.id === leaf ? " leaf" : ""}`, "data-entry-id": n.id },
      h("button", { class: "link", title: "make this the leaf (navigate)", onclick: () => void this.navigate(n.id) }, `${n.kind}: ${n.preview}`),
      n.label && h("span", { class: "badge" }, n.label),
      h("button", { class: "link small", onclick: () => void this.fork(n.id) }, "fork"),
    );
  }

  status(text: string): void {
    const el = byId("status");
    el.textContent = text;
    el.hidden = !text;
  }

  /** Shows the token form when agentd wants a token; true when it did. */
  needsToken(err: unknown): boolean {
    if (ConnectError.from(err).code !== Code.Unauthenticated) return false;
    const login = byId<HTMLDialogElement>("login-dialog");
    if (!login.open) login.showModal();
    return true;
  }

  wire(): void {
    const draft = byId<HTMLTextAreaElement>("draft");
    draft.addEventListener("input", () => {
      if (this.open) this.open.conv = { ...this.open.conv, ui: setDraft(this.open.conv.ui, draft.value) };
    });
    draft.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        void this.send(this.open?.activeRun ? "steer" : "prompt");
      }
    });
    byId("send").addEventListener("click", () => void this.send("prompt"));
    byId("steer").addEventListener("click", () => void this.send("steer"));
    byId("follow-up").addEventListener("click", () => void this.send("followUp"));
    byId("abort").addEventListener("click", () => void this.abort());
    byId("cancel-edit").addEventListener("click", () => {
      if (this.open) this.open.editParent = undefined;
      this.render();
    });
    byId("new-session").addEventListener("click", () => {
      byId("new-error").textContent = "";
      byId<HTMLDialogElement>("new-dialog").showModal();
    });
    byId("new-create").addEventListener("click", () => void this.createSession());
    byId("new-cancel").addEventListener("click", () => byId<HTMLDialogElement>("new-dialog").close());
    byId("refresh-context").addEventListener("click", () => this.open && void this.loadContext(this.open));
    const decide = (allow: boolean) => {
      const o = this.open;
      const dialog = byId<HTMLDialogElement>("approval-dialog");
      const req = o?.requests.get(dialog.dataset.toolCallId ?? "");
      if (!o || !req) return;
      const scope = (document.querySelector<HTMLInputElement>('input[name="scope"]:checked')?.value ?? "call") as ApprovalScopeName;
      o.later.add(req.toolCallId); // until the notice arrives
      dialog.close();
      void this.resolve(o.id, req, allow, scope, byId<HTMLInputElement>("approval-suggested").checked, byId<HTMLInputElement>("approval-reason").value);
    };
    byId("approval-allow").addEventListener("click", () => decide(true));
    byId("approval-deny").addEventListener("click", () => decide(false));
    byId("approval-later").addEventListener("click", () => {
      const dialog = byId<HTMLDialogElement>("approval-dialog");
      this.open?.later.add(dialog.dataset.toolCallId ?? "");
      dialog.close();
    });
    byId("login-save").addEventListener("click", () => {
      const token = byId<HTMLInputElement>("login-token").value.trim();
      sessionStorage.setItem(tokenKey, token);
      location.reload();
    });
  }
}

function pendingKey(p: PendingInteraction): string {
  return `${p.sessionId}/${p.kind}/${p.id}`;
}

function scopeName(s: ApprovalScope): ApprovalScopeName {
  return s === ApprovalScope.RUN ? "run" : s === ApprovalScope.SESSION ? "session" : "call";
}

function ruleText(tool: string, prefix: string, glob: string): string {
  return `${tool}${prefix ? ` commands starting "${prefix}"` : ""}${glob ? ` on paths matching ${glob}` : ""}`;
}

/** The arguments of a call waiting for approval; an edit shows what it replaces. */
function argumentsView(tool: string, args: JsonObject): HTMLElement[] {
  if (tool === "edit_file" && typeof args.old_text === "string" && typeof args.new_text === "string") {
    return [
      h("div", {}, "file ", h("code", {}, String(args.path ?? ""))),
      h("pre", { class: "diff" }, ...args.old_text.split("\n").map((l) => h("span", { class: "del" }, `-${l}\n`)), ...args.new_text.split("\n").map((l) => h("span", { class: "add" }, `+${l}\n`))),
    ];
  }
  if (tool === "bash" && typeof args.command === "string") return [h("pre", { class: "command" }, args.command)];
  return [h("pre", {}, json(args))];
}

/** An error as a person reads it: the refusal's reason and agentd's message. */
function describeError(err: unknown): string {
  const r = refusalOf(err);
  const ce = ConnectError.from(err);
  return r ? `${r.reasonName}: ${ce.rawMessage}` : ce.rawMessage || String(err);
}

function message(err: unknown): string {
  return ConnectError.from(err).rawMessage;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

new Console().start();
