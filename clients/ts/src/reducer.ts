// The UI reducer of the seed (§15–16): AgentEvent → ChatItem[], the app's
// own view model. A streaming assistant message is one card whose text grows
// in place; tool cards go running → success | error; approval items appear
// pending and resolve when the ApprovalNotice arrives; a hook's decision
// (HookNotice) is a card of its own. Drafts and collapsed
// cards live in UiState, outside both the chat items and the transcript, so
// nothing about the screen can reach the model.
//
// Every function here is pure: it returns new state and never mutates its
// input, so a UI framework can compare by reference.

import { create, toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";

import {
  ApprovalDecision,
  CompactionReason,
  HookAction,
  HookEvent,
  type AgentMessage,
  type ApprovalNotice,
  type Entry,
  type HookNotice,
} from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import type { ContentBlock } from "../../../gen/ts/agentd/v1/content_pb.js";
import { StopReason } from "../../../gen/ts/agentd/v1/content_pb.js";
import { AgentEventSchema, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";
import type { ToolResultMessage } from "../../../gen/ts/agentd/v1/messages_pb.js";

/** One thing on the screen. */
export type ChatItem =
  | { kind: "user"; id: string; entryId: string; text: string }
  | {
      kind: "assistant";
      id: string;
      entryId: string;
      text: string;
      thinking: string;
      isStreaming: boolean;
      /** The error or abort text when the answer failed; empty otherwise. */
      error: string;
    }
  | {
      kind: "tool";
      id: string;
      entryId: string;
      toolCallId: string;
      toolName: string;
      label: string;
      state: "running" | "success" | "error";
      /** The text of the tool's latest progress update while it runs (tool_execution_update). */
      progress: string;
      /** The result's text once the tool finished. */
      output: string;
      /** The result's structured details for the screen (a diff, a table's rows), never sent to the model. */
      details: JsonValue | undefined;
    }
  | {
      kind: "approval";
      id: string;
      toolCallId: string;
      label: string;
      decision: "pending" | "allowed" | "denied" | "timed_out";
      decidedBy: string;
      reason: string;
    }
  | {
      /** The older conversation was summarized: the model sees the summary from here on. */
      kind: "compaction";
      id: string;
      /** The CompactionSummary entry; empty while running or when it failed. */
      entryId: string;
      state: "running" | "done" | "failed";
      reason: "manual" | "threshold" | "overflow" | "unknown";
      tokensBefore: number;
      tokensAfter: number;
      summary: string;
      error: string;
    }
  | {
      /** A lifecycle hook changed or refused something (a HookNotice): why the conversation looks as it does. */
      kind: "hook";
      id: string;
      /** The HookNotice entry; empty until its message_end. */
      entryId: string;
      /** The hook_requested request id. */
      requestId: string;
      /** Where the hook was asked. */
      event: "pre_tool_use" | "post_tool_use" | "user_prompt" | "stop" | "pre_compact" | "unknown";
      /** The hook's name. */
      hook: string;
      /** What the decision did. */
      action: "denied" | "arguments_replaced" | "result_replaced" | "result_redacted" | "context_added" | "continued" | "instructions_supplied" | "timed_out" | "unknown";
      reason: string;
      /** Who answered, or "timeout". */
      decidedBy: string;
      /** The tool call concerned, for the tool hooks; empty otherwise. */
      toolCallId: string;
      toolName: string;
    };

/** The reducer's state: the items and which card is being streamed. */
export interface ChatState {
  readonly items: readonly ChatItem[];
  /** id of the assistant card that message_update events extend. */
  readonly streamingId: string;
  /** id of the card opened by the last non-assistant message_start. */
  readonly openId: string;
}

/** The state before any event. */
export const emptyChat: ChatState = { items: [], streamingId: "", openId: "" };

/** Applies one event. Unknown or irrelevant events return the same state. */
export function reduceChat(state: ChatState, event: AgentEvent): ChatState {
  const key = `${event.runId}/${event.seq}`;
  const e = event.event;
  switch (e.case) {
    case "messageStart": {
      const msg = e.value.message?.kind;
      switch (msg?.case) {
        case "assistant":
          return {
            ...state,
            items: [...state.items, { kind: "assistant", id: key, entryId: "", text: textOf(msg.value.content), thinking: "", isStreaming: true, error: "" }],
            streamingId: key,
          };
        case "user":
          return { ...state, items: [...state.items, { kind: "user", id: key, entryId: "", text: textOf(msg.value.content) }], openId: key };
        case "toolResult":
          return finishTool(state, msg.value, "", key);
        case "approvalNotice":
          return resolveApproval(state, msg.value, key);
        case "hookNotice":
          return addHookNotice(state, msg.value, "", key);
        default:
          return state;
      }
    }
    case "messageUpdate": {
      const d = e.value.delta;
      if (!state.streamingId) return state;
      if (d.case === "textDelta") return updateItem(state, state.streamingId, (it) => (it.kind === "assistant" ? { ...it, text: it.text + d.value.delta } : it));
      if (d.case === "thinkingDelta") return updateItem(state, state.streamingId, (it) => (it.kind === "assistant" ? { ...it, thinking: it.thinking + d.value.delta } : it));
      return state;
    }
    case "messageEnd": {
      const msg = e.value.message?.kind;
      const entryId = e.value.entryId;
      switch (msg?.case) {
        case "assistant": {
          const m = msg.value;
          const failed = m.stopReason === StopReason.ERROR || m.stopReason === StopReason.ABORTED;
          const final = (it: ChatItem): ChatItem =>
            it.kind === "assistant"
              ? { ...it, entryId, text: textOf(m.content), thinking: thinkingOf(m.content), isStreaming: false, error: failed ? m.errorMessage || "aborted" : "" }
              : it;
          if (!state.streamingId) {
            // A stream joined after message_start (Attach from a later seq).
            const card: ChatItem = { kind: "assistant", id: key, entryId: "", text: "", thinking: "", isStreaming: true, error: "" };
            return { ...state, items: [...state.items, final(card)] };
          }
          return { ...updateItem(state, state.streamingId, final), streamingId: "" };
        }
        case "user":
          if (!state.openId) return { ...state, items: [...state.items, { kind: "user", id: key, entryId, text: textOf(msg.value.content) }] };
          return { ...updateItem(state, state.openId, (it) => (it.kind === "user" ? { ...it, entryId } : it)), openId: "" };
        case "toolResult":
          return finishTool(state, msg.value, entryId, key);
        case "approvalNotice":
          return resolveApproval(state, msg.value, key);
        case "hookNotice":
          return addHookNotice(state, msg.value, entryId, key);
        case "compactionSummary": {
          // A stored summary (a transcript being replayed, or AppendMessages).
          if (state.items.some((it) => it.kind === "compaction" && it.entryId === entryId)) return state;
          const c = msg.value;
          return {
            ...state,
            items: [
              ...state.items,
              { kind: "compaction", id: key, entryId, state: "done", reason: reasonOf(c.reason), tokensBefore: Number(c.tokensBefore), tokensAfter: Number(c.tokensAfter), summary: c.summary, error: "" },
            ],
          };
        }
        default:
          return state;
      }
    }
    case "compactionStart":
      return {
        ...state,
        items: [
          ...state.items,
          { kind: "compaction", id: key, entryId: "", state: "running", reason: reasonOf(e.value.reason), tokensBefore: Number(e.value.tokensBefore), tokensAfter: 0, summary: "", error: "" },
        ],
      };
    case "compactionEnd": {
      const v = e.value;
      const done = (it: ChatItem): ChatItem =>
        it.kind === "compaction"
          ? { ...it, entryId: v.entryId, state: v.errorMessage ? "failed" : "done", tokensAfter: Number(v.tokensAfter), summary: v.summary?.summary ?? "", error: v.errorMessage }
          : it;
      if (v.dryRun) return state;
      const running = [...state.items].reverse().find((it) => it.kind === "compaction" && it.state === "running");
      if (running) return updateItem(state, running.id, done);
      const card: ChatItem = { kind: "compaction", id: key, entryId: "", state: "running", reason: reasonOf(v.reason), tokensBefore: Number(v.tokensBefore), tokensAfter: 0, summary: "", error: "" };
      return { ...state, items: [...state.items, done(card)] };
    }
    case "toolExecutionStart": {
      const { toolCallId, toolName, arguments: args } = e.value;
      const label = toolLabel(toolName, args ?? {});
      if (findTool(state, toolCallId)) return updateTool(state, toolCallId, (it) => ({ ...it, state: "running", label }));
      return { ...state, items: [...state.items, { kind: "tool", id: key, entryId: "", toolCallId, toolName, label, state: "running", progress: "", output: "", details: undefined }] };
    }
    case "toolExecutionUpdate": {
      const progress = textOf(e.value.content);
      return updateTool(state, e.value.toolCallId, (it) => (it.progress === progress ? it : { ...it, progress }));
    }
    case "toolExecutionEnd":
      return e.value.result ? finishTool(state, e.value.result, "", key) : state;
    case "approvalRequested": {
      const { toolCallId, toolName, arguments: args } = e.value;
      if (state.items.some((it) => it.kind === "approval" && it.toolCallId === toolCallId)) return state;
      const label = toolLabel(toolName, args ?? {});
      return { ...state, items: [...state.items, { kind: "approval", id: key, toolCallId, label, decision: "pending", decidedBy: "", reason: "" }] };
    }
    case "agentEnd":
      // A run that ended mid-answer leaves no card spinning.
      if (!state.streamingId) return state;
      return { ...updateItem(state, state.streamingId, (it) => (it.kind === "assistant" ? { ...it, isStreaming: false } : it)), streamingId: "" };
    default:
      return state;
  }
}

/**
 * Rebuilds the items of a stored transcript (GetTranscript) by replaying its
 * messages through reduceChat as the events a live run would have sent, so a
 * reopened conversation looks like the one that was watched live.
 */
export function itemsFromTranscript(entries: readonly Entry[]): ChatItem[] {
  let state = emptyChat;
  let seq = 0n;
  const emit = (runId: string, event: MessageInitShape<typeof AgentEventSchema>["event"]) => {
    seq++;
    state = reduceChat(state, create(AgentEventSchema, { runId, seq, event }));
  };
  for (const entry of entries) {
    if (entry.payload.case !== "message") continue;
    const message: AgentMessage = entry.payload.value;
    const k = message.kind;
    const runId = `entry:${entry.id}`;
    if (k.case === "toolResult") {
      emit(runId, { case: "toolExecutionEnd", value: { result: k.value } });
    }
    emit(runId, { case: "messageStart", value: { message } });
    emit(runId, { case: "messageEnd", value: { message, entryId: entry.id } });
    if (k.case === "assistant") {
      for (const block of k.value.content) {
        if (block.block.case === "toolCall") {
          const call = block.block.value;
          emit(runId, { case: "toolExecutionStart", value: { toolCallId: call.id, toolName: call.name, arguments: call.arguments } });
        }
      }
    }
  }
  return [...state.items];
}

function reasonOf(r: CompactionReason): "manual" | "threshold" | "overflow" | "unknown" {
  switch (r) {
    case CompactionReason.MANUAL:
      return "manual";
    case CompactionReason.THRESHOLD:
      return "threshold";
    case CompactionReason.OVERFLOW:
      return "overflow";
    default:
      return "unknown";
  }
}

/** Screen-only state: never part of the chat items or the transcript. */
export interface UiState {
  /** The composer's unsent text. */
  readonly draft: string;
  /** ids of the cards the user collapsed. */
  readonly collapsed: ReadonlySet<string>;
}

/** The UI state at start. */
export const emptyUi: UiState = { draft: "", collapsed: new Set() };

/** Returns ui with a new draft. */
export function setDraft(ui: UiState, draft: string): UiState {
  return { ...ui, draft };
}

/** Returns ui with the card's collapsed flag flipped. */
export function toggleCollapsed(ui: UiState, itemId: string): UiState {
  const collapsed = new Set(ui.collapsed);
  if (!collapsed.delete(itemId)) collapsed.add(itemId);
  return { ...ui, collapsed };
}

/**
 * The seed's DesktopConversationState: the transcript (messages as committed,
 * what the model builds on), the chat items (what the screen shows) and the
 * UI state (what only the screen knows), kept apart.
 */
export interface Conversation {
  readonly transcript: readonly AgentMessage[];
  readonly chat: ChatState;
  readonly ui: UiState;
}

/** A conversation with nothing in it. */
export const emptyConversation: Conversation = { transcript: [], chat: emptyChat, ui: emptyUi };

/** Applies an event: committed messages join the transcript; ui is never touched. */
export function applyEvent(conv: Conversation, event: AgentEvent): Conversation {
  const chat = reduceChat(conv.chat, event);
  const e = event.event;
  const transcript = e.case === "messageEnd" && e.value.message ? [...conv.transcript, e.value.message] : conv.transcript;
  return chat === conv.chat && transcript === conv.transcript ? conv : { ...conv, chat, transcript };
}

/** The concatenated text blocks of a message's content. */
export function textOf(content: readonly ContentBlock[]): string {
  return content.map((b) => (b.block.case === "text" ? b.block.value.text : b.block.case === "image" ? "[image]" : "")).join("");
}

function thinkingOf(content: readonly ContentBlock[]): string {
  return content.map((b) => (b.block.case === "thinking" ? b.block.value.thinking : "")).join("");
}

function toolLabel(name: string, args: unknown): string {
  const json = JSON.stringify(args ?? {});
  return `${name} ${json.length > 80 ? json.slice(0, 77) + "..." : json}`;
}

function updateItem(state: ChatState, id: string, f: (it: ChatItem) => ChatItem): ChatState {
  const i = state.items.findIndex((it) => it.id === id);
  if (i < 0) return state;
  const items = state.items.slice();
  items[i] = f(items[i]!);
  return { ...state, items };
}

type ToolItem = Extract<ChatItem, { kind: "tool" }>;

function findTool(state: ChatState, toolCallId: string): ToolItem | undefined {
  return state.items.find((it): it is ToolItem => it.kind === "tool" && it.toolCallId === toolCallId);
}

function updateTool(state: ChatState, toolCallId: string, f: (it: ToolItem) => ToolItem): ChatState {
  const card = findTool(state, toolCallId);
  return card ? updateItem(state, card.id, (it) => (it.kind === "tool" ? f(it) : it)) : state;
}

function finishTool(state: ChatState, result: ToolResultMessage, entryId: string, key: string): ChatState {
  const done = (it: ToolItem): ToolItem => ({
    ...it,
    state: result.isError ? "error" : "success",
    output: textOf(result.content),
    details: result.details ? toJson(ValueSchema, result.details) : it.details,
    entryId: entryId || it.entryId,
  });
  if (findTool(state, result.toolCallId)) return updateTool(state, result.toolCallId, done);
  const card: ToolItem = {
    kind: "tool",
    id: key,
    entryId: "",
    toolCallId: result.toolCallId,
    toolName: result.toolName,
    label: result.toolName,
    state: "running",
    progress: "",
    output: "",
    details: undefined,
  };
  return { ...state, items: [...state.items, done(card)] };
}

function resolveApproval(state: ChatState, notice: ApprovalNotice, key: string): ChatState {
  const decision =
    notice.decision === ApprovalDecision.ALLOWED ? "allowed" : notice.decision === ApprovalDecision.DENIED ? "denied" : notice.decision === ApprovalDecision.TIMED_OUT ? "timed_out" : "pending";
  const i = state.items.findIndex((it) => it.kind === "approval" && it.toolCallId === notice.toolCallId);
  if (i < 0) {
    if (!notice.visibleInUi) return state;
    return {
      ...state,
      items: [...state.items, { kind: "approval", id: key, toolCallId: notice.toolCallId, label: notice.toolName, decision, decidedBy: notice.decidedBy, reason: notice.reason }],
    };
  }
  return updateItem(state, state.items[i]!.id, (it) => (it.kind === "approval" ? { ...it, decision, decidedBy: notice.decidedBy, reason: notice.reason } : it));
}

const hookEvents: Partial<Record<HookEvent, Extract<ChatItem, { kind: "hook" }>["event"]>> = {
  [HookEvent.PRE_TOOL_USE]: "pre_tool_use",
  [HookEvent.POST_TOOL_USE]: "post_tool_use",
  [HookEvent.USER_PROMPT]: "user_prompt",
  [HookEvent.STOP]: "stop",
  [HookEvent.PRE_COMPACT]: "pre_compact",
};

const hookActions: Partial<Record<HookAction, Extract<ChatItem, { kind: "hook" }>["action"]>> = {
  [HookAction.DENIED]: "denied",
  [HookAction.ARGUMENTS_REPLACED]: "arguments_replaced",
  [HookAction.RESULT_REPLACED]: "result_replaced",
  [HookAction.RESULT_REDACTED]: "result_redacted",
  [HookAction.CONTEXT_ADDED]: "context_added",
  [HookAction.CONTINUED]: "continued",
  [HookAction.INSTRUCTIONS_SUPPLIED]: "instructions_supplied",
  [HookAction.TIMED_OUT]: "timed_out",
};

// addHookNotice shows a HookNotice once: message_start adds the card,
// message_end (or a replayed transcript) gives it its entry id.
function addHookNotice(state: ChatState, notice: HookNotice, entryId: string, key: string): ChatState {
  if (!notice.visibleInUi) return state;
  const card = state.items.find((it) => it.kind === "hook" && it.requestId === notice.requestId && it.requestId !== "");
  if (card) return entryId ? updateItem(state, card.id, (it) => (it.kind === "hook" ? { ...it, entryId } : it)) : state;
  const item: ChatItem = {
    kind: "hook",
    id: key,
    entryId,
    requestId: notice.requestId,
    event: hookEvents[notice.event] ?? "unknown",
    hook: notice.hook,
    action: hookActions[notice.action] ?? "unknown",
    reason: notice.reason,
    decidedBy: notice.decidedBy,
    toolCallId: notice.toolCallId,
    toolName: notice.toolName,
  };
  return { ...state, items: [...state.items, item] };
}
