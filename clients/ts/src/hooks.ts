// Lifecycle hooks from the app's side. A session that declares hooks
// (SessionConfig.hooks) stops at each matching point of a run, emits
// hook_requested and waits for SubmitHookResult. The helpers here turn a
// plain function into a HookHandler for one event; AgentdClient.handle()
// watches the run's stream, picks the handler of each request's event and
// answers with what the function returns: verdict.allow(),
// verdict.deny(reason), verdict.modify({...}) or verdict.redact().

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

import { HookEvent } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import type { HookRequested } from "../../../gen/ts/agentd/v1/events_pb.js";
import type { ToolResultMessage } from "../../../gen/ts/agentd/v1/messages_pb.js";
import type { Content } from "./client.js";
import { textOf } from "./reducer.js";

/**
 * A client's answer to one hook_requested event. Which verdicts and fields
 * an event accepts is in HookEvent's documentation; agentd refuses the
 * others with the field named.
 */
export interface HookAnswer {
  /** allow: go on unchanged; deny: refuse; modify: change; redact (POST_TOOL_USE): hide the result. */
  verdict: "allow" | "deny" | "modify" | "redact";
  /** Why; the model sees it on a denied tool call and the HookNotice records it. */
  reason?: string;
  /** PRE_TOOL_USE modify: the arguments the call runs with instead (validated against the tool's schema). */
  arguments?: JsonObject;
  /**
   * POST_TOOL_USE modify: the result the model sees instead. USER_PROMPT
   * modify: content added to this run's model calls. STOP modify: the user
   * message the run continues with.
   */
  content?: Content;
  /** POST_TOOL_USE modify: the details user interfaces see instead; null removes them, undefined keeps them. */
  details?: JsonValue | null;
  /** PRE_COMPACT modify: the summarizer's instructions. */
  instructions?: string;
  /** Whether the model sees the HookNotice this decision records. */
  includeInModelContext?: boolean;
  /** Who decided, recorded in the HookNotice. */
  decidedBy?: string;
}

/** What a HookAnswer may add to its verdict. */
export type HookAnswerOptions = Pick<HookAnswer, "reason" | "includeInModelContext" | "decidedBy">;

/** The changes a modify verdict carries, with its reason and record options. */
export type HookChange = Omit<HookAnswer, "verdict">;

/** Builds the HookAnswer of each verdict. */
export const verdict = {
  /** Go on unchanged. */
  allow(options: HookAnswerOptions = {}): HookAnswer {
    return { ...options, verdict: "allow" };
  },
  /** Refuse the tool call, the prompt or the compaction; the reason reaches the model on a tool call. */
  deny(reason = "", options: HookAnswerOptions = {}): HookAnswer {
    return { ...options, reason, verdict: "deny" };
  },
  /** Change what the event allows: arguments, content (and details), or instructions. */
  modify(change: HookChange): HookAnswer {
    return { ...change, verdict: "modify" };
  },
  /** POST_TOOL_USE: hide the result from the model (it sees "[redacted by hook]"). */
  redact(reason = "", options: HookAnswerOptions = {}): HookAnswer {
    return { ...options, reason, verdict: "redact" };
  },
};

type Awaitable<T> = T | Promise<T>;

/**
 * Answers the hook_requested events of one event. handle() asks the first
 * handler whose event (and hook name, when given) matches a request; a
 * request no handler matches stays unanswered until its hook times out.
 */
export interface HookHandler {
  /** The event answered. */
  readonly event: HookEvent;
  /** Only the requests of the hook of this name (Hook.name, or "hooks[<index>]"); all when empty. */
  readonly hook?: string;
  /** Decides one request. A throw leaves it unanswered (its on_timeout rule decides) and ends handle()'s iteration. */
  answer(request: HookRequested): Awaitable<HookAnswer>;
}

/** Options of the on… helpers. */
export interface HookHandlerOptions {
  /** Answer only the hook of this name; useful when a session declares several of one event. */
  hook?: string;
}

function handler(event: HookEvent, options: HookHandlerOptions, answer: (request: HookRequested) => Awaitable<HookAnswer>): HookHandler {
  return options.hook ? { event, hook: options.hook, answer } : { event, answer };
}

/**
 * PRE_TOOL_USE: before a tool call runs (its arguments validated, before
 * approval). fn gets the arguments and the request (request.toolCall has
 * the call's id and name) and allows, denies with a reason the model sees,
 * or modifies `arguments`.
 */
export function onPreToolUse(
  fn: (args: JsonObject, request: HookRequested) => Awaitable<HookAnswer>,
  options: HookHandlerOptions = {},
): HookHandler {
  return handler(HookEvent.PRE_TOOL_USE, options, (request) => fn(request.toolCall?.arguments ?? {}, request));
}

/**
 * POST_TOOL_USE: after a tool call ran, before the model sees its result.
 * fn gets the result and the request and allows (keep), modifies `content`
 * and/or `details`, or redacts.
 */
export function onPostToolUse(
  fn: (result: ToolResultMessage | undefined, request: HookRequested) => Awaitable<HookAnswer>,
  options: HookHandlerOptions = {},
): HookHandler {
  return handler(HookEvent.POST_TOOL_USE, options, (request) => fn(request.toolResult, request));
}

/**
 * USER_PROMPT: before a prompt, steering or follow-up message enters the
 * transcript. fn gets its text and the request (request.source says which)
 * and allows, denies (the Prompt fails with PROMPT_REFUSED; nothing is
 * stored), or modifies with `content` added to this run's model calls.
 */
export function onUserPrompt(
  fn: (text: string, request: HookRequested) => Awaitable<HookAnswer>,
  options: HookHandlerOptions = {},
): HookHandler {
  return handler(HookEvent.USER_PROMPT, options, (request) => fn(messageText(request), request));
}

/**
 * STOP: when the run would end normally. fn gets the text of the answer the
 * run would end with and the request (request.continuations counts the
 * earlier continuations) and allows the end, or modifies with `content`, the
 * user message the run continues with.
 */
export function onStop(
  fn: (answer: string, request: HookRequested) => Awaitable<HookAnswer>,
  options: HookHandlerOptions = {},
): HookHandler {
  return handler(HookEvent.STOP, options, (request) => fn(messageText(request), request));
}

/**
 * PRE_COMPACT: before a compaction (automatic or Compact). fn gets the
 * instructions so far and the request (request.compactionReason,
 * request.tokensBefore) and allows, denies (vetoes), or modifies
 * `instructions`.
 */
export function onPreCompact(
  fn: (instructions: string, request: HookRequested) => Awaitable<HookAnswer>,
  options: HookHandlerOptions = {},
): HookHandler {
  return handler(HookEvent.PRE_COMPACT, options, (request) => fn(request.instructions, request));
}

/** The handler of the first of `handlers` that answers `request`, if any. */
export function hookHandlerFor(handlers: readonly HookHandler[], request: HookRequested): HookHandler | undefined {
  return handlers.find((h) => h.event === request.event && (!h.hook || h.hook === request.hook));
}

// messageText is the text of the user or assistant message a USER_PROMPT or
// STOP request carries.
function messageText(request: HookRequested): string {
  const k = request.message?.kind;
  return k?.case === "user" || k?.case === "assistant" ? textOf(k.value.content) : "";
}
