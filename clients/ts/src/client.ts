// AgentdClient is the thin layer an app needs over the generated gRPC client:
// built over any Connect transport (node.ts: gRPC over HTTP/2; web.ts: the
// Connect protocol over fetch, for browsers), it streams a prompt's events as an async
// iterator, answer client-executed tools, approvals (with their scopes and
// rules) and lifecycle hooks, and follow a run across a dropped stream by
// resuming with Attach from the last seq seen. Everything else is the
// generated client, exposed as `rpc`.

import { create, fromJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import {
  Code,
  ConnectError,
  createClient,
  type CallOptions,
  type Client,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";

import {
  ApprovalDecision,
  ApprovalScope,
  type AgentMessageSchema,
  type ApprovalRule,
  type ApprovalRuleSchema,
  type Entry,
} from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import type { ContentBlock } from "../../../gen/ts/agentd/v1/content_pb.js";
import { ContentBlockSchema } from "../../../gen/ts/agentd/v1/content_pb.js";
import type { AgentEvent, ApprovalRequested, CompactionEnd, RunOutcome, ToolCallRequested } from "../../../gen/ts/agentd/v1/events_pb.js";
import {
  AgentService,
  BusyPolicy,
  ErrorReason,
  HookVerdict,
  InDoubtAction,
  type ClearQueueResponse,
  type GetContextResponse,
  type ListRunsResponse,
  type NavigateResponse,
  type ResolveInDoubtResponse,
  type Run,
  type TreeNode,
  type UpdateSessionResponse,
} from "../../../gen/ts/agentd/v1/service_pb.js";
import type { Context, Session, SessionConfigSchema } from "../../../gen/ts/agentd/v1/session_pb.js";
import { hookHandlerFor, type HookAnswer, type HookHandler } from "./hooks.js";

/** How to reach agentd. */
export interface ConnectOptions {
  /** host:port of a plaintext agentd, or a full http(s):// URL. */
  address: string;
  /** Sent as `authorization: Bearer <token>` when agentd runs with --auth-token. */
  token?: string;
}

/** The interceptors every transport gets: the bearer token, when set. */
export function authInterceptors(token: string | undefined): Interceptor[] {
  if (!token) return [];
  const header = `Bearer ${token}`;
  return [
    (next) => (req) => {
      req.header.set("authorization", header);
      return next(req);
    },
  ];
}

/** The base URL of an address given as host:port or as a URL. */
export function baseUrlOf(address: string): string {
  return /^https?:\/\//.test(address) ? address : `http://${address}`;
}

/** Content accepted wherever a message is sent: plain text or blocks. */
export type Content = string | MessageInitShape<typeof ContentBlockSchema>[];

/** Options of a streaming call. */
export interface StreamOptions {
  /** Keep the run going when this stream ends early (re-join with attach). */
  detach?: boolean;
  /** Makes the call idempotent: a retry joins the run the first attempt started. */
  requestId?: string;
  /** Ends the stream (not the run, when detached) when aborted. */
  signal?: AbortSignal;
  /**
   * A JSON Schema (root `"type": "object"`) for the run's answer, which then
   * arrives as `structuredOutput` on agent_end and on the final assistant
   * message; unset uses the session's `outputSchema`.
   */
  outputSchema?: JsonObject;
  /** Corrections of an answer that does not validate (default: the session's, else 2). */
  maxOutputRetries?: number;
  /**
   * The caller's correlation ids: stored with the run (getRun, and
   * listRuns filters on them) and echoed on agent_start and agent_end. At
   * most 32 entries; keys of 1 to 64 bytes of [a-zA-Z0-9._:/-], values of
   * at most 512 bytes.
   */
  metadata?: Record<string, string>;
}

/** The output schema fields of a Prompt or Continue request. */
function outputOptions(options: StreamOptions): { outputSchema?: JsonObject; maxOutputRetries?: number } {
  return { outputSchema: options.outputSchema, maxOutputRetries: options.maxOutputRetries };
}

/** Options of Prompt. */
export interface PromptOptions extends StreamOptions {
  /**
   * What to do while another run is active: REJECT (the default) refuses;
   * ENQUEUE and STEER queue the prompt into that run and stream it;
   * INTERRUPT aborts it and streams this prompt's own run.
   */
  ifBusy?: BusyPolicy;
}

/** Filters and paging of listRuns. */
export interface ListRunsOptions {
  /** Only runs that ended with one of these outcomes (UNSPECIFIED: the active run); empty: every run. */
  outcomes?: RunOutcome[];
  /** Only runs that started at or after this time. */
  startTimeAfter?: Date;
  /** Only runs that started before this time. */
  startTimeBefore?: Date;
  /** Only runs whose request metadata has each of these keys with this value; an empty value matches any value. */
  metadataFilter?: Record<string, string>;
  /** The most runs to return, 1 to 1000; 0 (the default) means 100. */
  pageSize?: number;
  /** The nextPageToken of a previous response with the same filters; empty for the first page. */
  pageToken?: string;
}

/** A tool result from the client's own tool implementation. */
export interface ToolResultInput {
  /** What the model sees. */
  content: Content;
  /** Structured data for user interfaces; never sent to the model. */
  details?: JsonValue;
  /** True when the tool failed. */
  isError?: boolean;
}

/** A client-executed tool: takes the validated arguments, returns the result. */
export type ToolHandler = (args: JsonObject, request: ToolCallRequested) => Promise<ToolResultInput> | ToolResultInput;

/**
 * How far an approval decision reaches: this call; the later calls of the
 * same tool in the rest of this run; or in this session (stored as an
 * ApprovalRule that forks, exports and replicas carry).
 */
export type ApprovalScopeName = "call" | "run" | "session";

/**
 * The part of an ApprovalRule a client chooses: the calls a RUN or SESSION
 * decision also decides. agentd sets the decision, id, author and time.
 */
export interface RuleInput {
  /** The tool, by exact name; defaults to the tool of the call being decided. */
  toolName?: string;
  /** bash only: commands that start with this text, such as "git status". */
  commandPrefix?: string;
  /** File tools only: workspace paths matching this glob (Go's path.Match), such as "src/*.go". */
  pathGlob?: string;
  /** Recorded with the rule; a denial by the rule shows it to the model. */
  reason?: string;
}

/** How resolveApproval, approve and deny decide, beyond allow or deny. */
export interface ResolveOptions {
  /** Why; a denial reaches the model with it. */
  reason?: string;
  /** Who decided, recorded in the ApprovalNotice (and a SESSION rule). */
  decidedBy?: string;
  /** How far the decision reaches; "call" by default. */
  scope?: ApprovalScopeName;
  /**
   * Limits a "run" or "session" scope to the calls matching it; "suggested"
   * takes the request's suggested_rule (pass the ApprovalRequested).
   * Without it the scope covers every later call of the tool.
   */
  rule?: RuleInput | "suggested";
  /** With allow only: the arguments the call runs with instead of the model's (validated). */
  arguments?: JsonObject;
}

/** What an Approver returns: allow or deny, with the options of ResolveOptions. */
export interface ApprovalAnswer extends ResolveOptions {
  allow: boolean;
}

/** A person (or policy) deciding an approval request. */
export type Approver = (request: ApprovalRequested) => Promise<ApprovalAnswer> | ApprovalAnswer;

/** What handle() answers on the app's behalf. */
export interface RunHandlers {
  /** Client tools by name. */
  tools?: Record<string, ToolHandler>;
  /** Decides approval_requested events; without it they stay pending until they time out. */
  approve?: Approver;
  /**
   * Answer hook_requested events (see onPreToolUse and its siblings): the
   * first handler of the request's event answers; without one the request
   * waits until its hook times out.
   */
  hooks?: readonly HookHandler[];
}

/**
 * How ResolveInDoubt decides a call that started and never finished:
 * run it again (a server tool, with the same arguments and idempotency
 * key), skip it with a message the model sees, or supply its result.
 */
export type InDoubtDecision =
  | { action: "retry" }
  | { action: "skip"; message?: string }
  | { action: "supply"; result: ToolResultInput };

const scopes: Record<ApprovalScopeName, ApprovalScope> = {
  call: ApprovalScope.CALL,
  run: ApprovalScope.RUN,
  session: ApprovalScope.SESSION,
};

const verdicts: Record<HookAnswer["verdict"], HookVerdict> = {
  allow: HookVerdict.ALLOW,
  deny: HookVerdict.DENY,
  modify: HookVerdict.MODIFY,
  redact: HookVerdict.REDACT,
};

/** Converts text or block initialisers into content blocks. */
export function toContent(content: Content): ContentBlock[] {
  if (typeof content === "string") {
    return [create(ContentBlockSchema, { block: { case: "text", value: { text: content } } })];
  }
  return content.map((block) => create(ContentBlockSchema, block));
}

/** True for the errors after which a run can still be followed with Attach. */
export function isResumable(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return code === Code.Unavailable || code === Code.Internal || code === Code.Unknown || code === Code.DeadlineExceeded;
}

/**
 * Refusal is why agentd refused a call, read from the google.rpc.ErrorInfo
 * detail (domain "agentd.v1") of its error: branch on `reason`, never on
 * the text.
 */
export interface Refusal {
  /** The reason; see the ErrorReason enum's documentation. */
  reason: ErrorReason;
  /** The reason as the detail carries it, such as "SESSION_BUSY". */
  reasonName: string;
  /** The refusal's particulars, such as "session_id" and "run_id". */
  metadata: Record<string, string>;
  /** The status code. */
  code: Code;
}

const errorInfoType = "google.rpc.ErrorInfo";

/** The Refusal an error carries, or undefined when it carries none. */
export function refusalOf(err: unknown): Refusal | undefined {
  const ce = ConnectError.from(err);
  for (const d of ce.details) {
    if (!("type" in d) || d.type !== errorInfoType) continue;
    const info = decodeErrorInfo(d.value);
    if (info.domain !== "agentd.v1") continue;
    const reason = (ErrorReason as unknown as Record<string, ErrorReason>)[info.reason];
    return { reason: reason ?? ErrorReason.UNSPECIFIED, reasonName: info.reason, metadata: info.metadata, code: ce.code };
  }
  return undefined;
}

// decodeErrorInfo reads google.rpc.ErrorInfo's three fields (reason = 1,
// domain = 2, metadata = 3) with the protobuf runtime's wire reader: its
// schema is not among the generated types.
function decodeErrorInfo(bytes: Uint8Array): { reason: string; domain: string; metadata: Record<string, string> } {
  const out = { reason: "", domain: "", metadata: {} as Record<string, string> };
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [field, wireType] = r.tag();
    if (field === 1) out.reason = r.string();
    else if (field === 2) out.domain = r.string();
    else if (field === 3) {
      const entry = new BinaryReader(r.bytes());
      let key = "";
      let value = "";
      while (entry.pos < entry.len) {
        const [f, wt] = entry.tag();
        if (f === 1) key = entry.string();
        else if (f === 2) value = entry.string();
        else entry.skip(wt);
      }
      out.metadata[key] = value;
    } else r.skip(wireType);
  }
  return out;
}

/**
 * AgentdClient talks to one agentd. Make one with connect (Node, node.ts),
 * connectWeb (browsers, web.ts) or over(transport); call close() when done.
 */
export class AgentdClient {
  /** The generated client, for every RPC the wrapper does not cover. */
  readonly rpc: Client<typeof AgentService>;
  readonly #close: () => void;

  private constructor(rpc: Client<typeof AgentService>, close: () => void) {
    this.rpc = rpc;
    this.#close = close;
  }

  /**
   * A client over a Connect transport of the caller's making; close, when
   * given, releases what the transport holds (such as HTTP/2 sessions).
   */
  static over(transport: Transport, close: () => void = () => {}): AgentdClient {
    return new AgentdClient(createClient(AgentService, transport), close);
  }

  /** Closes the connection; streams still open fail. */
  close(): void {
    this.#close();
  }

  /**
   * Creates a session; the config may script the faux model (config.faux).
   * With a sessionId of the caller's choosing it is idempotent: the same id
   * and config return the existing session.
   */
  async createSession(
    config: MessageInitShape<typeof SessionConfigSchema>,
    options: { title?: string; labels?: Record<string, string>; sessionId?: string } = {},
  ): Promise<Session> {
    const res = await this.rpc.createSession({
      config,
      title: options.title ?? "",
      labels: options.labels ?? {},
      sessionId: options.sessionId ?? "",
    });
    if (!res.session) throw new Error("agentd: CreateSession returned no session");
    return res.session;
  }

  /** Sends a prompt and yields the run's events until agent_end. */
  prompt(sessionId: string, content: Content, options: PromptOptions = {}): AsyncIterable<AgentEvent> {
    return this.rpc.prompt(
      {
        sessionId,
        content: toContent(content),
        detach: options.detach ?? false,
        requestId: options.requestId ?? "",
        ifBusy: options.ifBusy ?? BusyPolicy.UNSPECIFIED,
        metadata: options.metadata ?? {},
        ...outputOptions(options),
      },
      callOptions(options.signal),
    );
  }

  /** Runs the agent on the current transcript and yields the run's events. */
  continue(sessionId: string, options: StreamOptions = {}): AsyncIterable<AgentEvent> {
    return this.rpc.continue(
      {
        sessionId,
        detach: options.detach ?? false,
        requestId: options.requestId ?? "",
        metadata: options.metadata ?? {},
        ...outputOptions(options),
      },
      callOptions(options.signal),
    );
  }

  /** Yields a run's events after afterSeq (0 replays from the start), then live ones. */
  attach(
    sessionId: string,
    options: { runId?: string; afterSeq?: bigint; signal?: AbortSignal } = {},
  ): AsyncIterable<AgentEvent> {
    return this.rpc.attach(
      { sessionId, runId: options.runId ?? "", afterSeq: options.afterSeq ?? 0n },
      callOptions(options.signal),
    );
  }

  /**
   * Yields the events of `stream` and, when it breaks before agent_end with a
   * transport error, re-joins the run with Attach after the last seq seen, so
   * the caller sees every event exactly once. Start `stream` with detach so
   * the run survives the drop.
   */
  async *resume(sessionId: string, stream: AsyncIterable<AgentEvent>, maxRetries = 5): AsyncGenerator<AgentEvent> {
    let runId = "";
    let lastSeq = 0n;
    let retries = 0;
    let current = stream;
    for (;;) {
      try {
        for await (const event of current) {
          if (event.seq <= lastSeq && event.runId === runId) continue;
          runId = event.runId;
          lastSeq = event.seq;
          yield event;
          if (event.event.case === "agentEnd") return;
        }
        return;
      } catch (err) {
        if (!runId || !isResumable(err) || retries >= maxRetries) throw err;
        retries++;
        current = this.attach(sessionId, { runId, afterSeq: lastSeq });
      }
    }
  }

  /**
   * Yields the events of `stream` and answers on the way: tool_call_requested
   * runs the named client tool and submits its result (a throwing or unknown
   * tool becomes an error result the model sees), approval_requested asks
   * the approver and resolves it (with its scope, rule and edited
   * arguments), hook_requested asks the hook handler of its event and
   * submits the answer.
   */
  async *handle(sessionId: string, stream: AsyncIterable<AgentEvent>, handlers: RunHandlers): AsyncGenerator<AgentEvent> {
    for await (const event of stream) {
      yield event;
      const e = event.event;
      if (e.case === "toolCallRequested") {
        const tool = handlers.tools?.[e.value.toolName];
        let result: ToolResultInput;
        try {
          result = tool
            ? await tool(e.value.arguments ?? {}, e.value)
            : { content: `no client tool named ${e.value.toolName}`, isError: true };
        } catch (err) {
          result = { content: `${e.value.toolName} failed: ${err instanceof Error ? err.message : String(err)}`, isError: true };
        }
        await this.submitToolResult(sessionId, e.value.toolCallId, result);
      } else if (e.case === "approvalRequested" && handlers.approve) {
        const { allow, ...options } = await handlers.approve(e.value);
        await (allow ? this.approve(sessionId, e.value, options) : this.deny(sessionId, e.value, options));
      } else if (e.case === "hookRequested" && handlers.hooks) {
        const h = hookHandlerFor(handlers.hooks, e.value);
        if (h) await this.submitHookResult(sessionId, e.value.requestId, await h.answer(e.value));
      }
    }
  }

  /** Queues a message for the active run, delivered after the current tool batch. */
  async steer(sessionId: string, content: Content): Promise<number> {
    return (await this.rpc.steer({ sessionId, content: toContent(content) })).queued;
  }

  /** Queues a message for the active run, delivered when the agent would stop. */
  async followUp(sessionId: string, content: Content): Promise<number> {
    return (await this.rpc.followUp({ sessionId, content: toContent(content) })).queued;
  }

  /** Removes and returns the steering and follow-up messages waiting for the active run. */
  async clearQueue(sessionId: string): Promise<ClearQueueResponse> {
    return await this.rpc.clearQueue({ sessionId });
  }

  /**
   * Returns one run of the session: when and how it ran and ended, the
   * request that started it (with its metadata), its usage, error and
   * structured output. NOT_FOUND (RUN_NOT_FOUND) for a run of another session.
   */
  async getRun(sessionId: string, runId: string): Promise<Run> {
    const res = await this.rpc.getRun({ sessionId, runId });
    if (!res.run) throw new Error("agentd: GetRun returned no run");
    return res.run;
  }

  /**
   * Returns one page of the session's runs, newest first, filtered by
   * outcome, start time and metadata; pass its nextPageToken (with the same
   * filters) for the next page, until it is empty.
   */
  async listRuns(sessionId: string, options: ListRunsOptions = {}): Promise<ListRunsResponse> {
    return await this.rpc.listRuns({
      sessionId,
      outcomes: options.outcomes ?? [],
      startTimeAfter: options.startTimeAfter === undefined ? undefined : timestampFromDate(options.startTimeAfter),
      startTimeBefore: options.startTimeBefore === undefined ? undefined : timestampFromDate(options.startTimeBefore),
      metadataFilter: options.metadataFilter ?? {},
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** Aborts the active run (or runId); its stream still ends with agent_end. */
  async abort(sessionId: string, runId = ""): Promise<string> {
    return (await this.rpc.abort({ sessionId, runId })).runId;
  }

  /** Answers a tool_call_requested event with the client tool's result. */
  async submitToolResult(sessionId: string, toolCallId: string, result: ToolResultInput): Promise<void> {
    await this.rpc.submitToolResult({
      sessionId,
      toolCallId,
      content: toContent(result.content),
      details: result.details === undefined ? undefined : toValue(result.details),
      isError: result.isError ?? false,
    });
  }

  /**
   * Answers an approval_requested event; returns the rule stored for a
   * "session" scope. Given only the call's id, a rule must name its tool
   * (`rule.toolName`); approve and deny take the request and default it.
   */
  async resolveApproval(sessionId: string, toolCallId: string, allow: boolean, options: ResolveOptions = {}): Promise<ApprovalRule | undefined> {
    return await this.#resolve(sessionId, [toolCallId], allow, options, undefined);
  }

  /**
   * Allows one waiting call, or several of the same run in one request (all
   * are decided or none). Pass the ApprovalRequested to let the rule default
   * to its tool, or to use its suggested rule:
   * `approve(id, request, { scope: "session", rule: "suggested" })`.
   * Returns the rule stored for a "session" scope.
   */
  async approve(
    sessionId: string,
    call: ApprovalRequested | string | readonly (ApprovalRequested | string)[],
    options: ResolveOptions = {},
  ): Promise<ApprovalRule | undefined> {
    const calls = Array.isArray(call) ? call : [call as ApprovalRequested | string];
    return await this.#resolve(sessionId, calls.map(callId), true, options, calls.find((c) => typeof c !== "string"));
  }

  /** Refuses one waiting call or several (see approve); the model gets an error result carrying the reason. */
  async deny(
    sessionId: string,
    call: ApprovalRequested | string | readonly (ApprovalRequested | string)[],
    options: ResolveOptions = {},
  ): Promise<ApprovalRule | undefined> {
    const calls = Array.isArray(call) ? call : [call as ApprovalRequested | string];
    return await this.#resolve(sessionId, calls.map(callId), false, options, calls.find((c) => typeof c !== "string"));
  }

  async #resolve(
    sessionId: string,
    toolCallIds: string[],
    allow: boolean,
    options: ResolveOptions,
    request: ApprovalRequested | string | undefined,
  ): Promise<ApprovalRule | undefined> {
    const [first = "", ...more] = toolCallIds;
    const req = typeof request === "string" ? undefined : request;
    const res = await this.rpc.resolveApproval({
      sessionId,
      toolCallId: first,
      toolCallIds: more,
      decision: allow ? ApprovalDecision.ALLOWED : ApprovalDecision.DENIED,
      reason: options.reason ?? "",
      decidedBy: options.decidedBy ?? "",
      scope: options.scope ? scopes[options.scope] : ApprovalScope.UNSPECIFIED,
      rule: ruleOf(options.rule, req),
      arguments: options.arguments,
    });
    return res.rule;
  }

  /** Returns the approval rules in force on the session's current path, oldest first. */
  async listApprovalRules(sessionId: string): Promise<ApprovalRule[]> {
    return (await this.rpc.listApprovalRules({ sessionId })).rules;
  }

  /** Removes a rule (ApprovalRule.id) from the session's path; returns the ApprovalRuleRemoval entry recorded. */
  async deleteApprovalRule(sessionId: string, ruleId: string): Promise<Entry | undefined> {
    return (await this.rpc.deleteApprovalRule({ sessionId, ruleId })).entry;
  }

  /**
   * Answers a hook_requested event with a HookAnswer (see verdict.allow,
   * verdict.deny, verdict.modify, verdict.redact).
   */
  async submitHookResult(sessionId: string, requestId: string, answer: HookAnswer): Promise<void> {
    await this.rpc.submitHookResult({
      sessionId,
      requestId,
      verdict: verdicts[answer.verdict],
      reason: answer.reason ?? "",
      arguments: answer.arguments,
      content: answer.content === undefined ? [] : toContent(answer.content),
      details: answer.details === undefined || answer.details === null ? undefined : toValue(answer.details),
      replaceDetails: answer.details !== undefined,
      instructions: answer.instructions ?? "",
      includeInModelContext: answer.includeInModelContext ?? false,
      decidedBy: answer.decidedBy ?? "",
    });
  }

  /**
   * Decides a tool call left in doubt (tool_in_doubt) by a crash or a lost
   * lease, on the idle session: retry it (server tools; for a client tool,
   * run it yourself with its idempotency key and supply the result), skip
   * it, or supply its result. The session takes new runs once no call is in
   * doubt; the response lists those still in doubt.
   */
  async resolveInDoubt(sessionId: string, toolCallId: string, decision: InDoubtDecision): Promise<ResolveInDoubtResponse> {
    switch (decision.action) {
      case "retry":
        return await this.rpc.resolveInDoubt({ sessionId, toolCallId, action: InDoubtAction.RETRY });
      case "skip":
        return await this.rpc.resolveInDoubt({ sessionId, toolCallId, action: InDoubtAction.SKIP, message: decision.message ?? "" });
      case "supply": {
        const r = decision.result;
        return await this.rpc.resolveInDoubt({
          sessionId,
          toolCallId,
          action: InDoubtAction.SUPPLY,
          content: toContent(r.content),
          details: r.details === undefined ? undefined : toValue(r.details),
          isError: r.isError ?? false,
        });
      }
    }
  }

  /** Returns every entry on the session's current path, root first, reading all pages. */
  async transcript(sessionId: string): Promise<Entry[]> {
    const entries: Entry[] = [];
    let pageToken = "";
    do {
      const res = await this.rpc.getTranscript({ sessionId, pageSize: 1000, pageToken });
      entries.push(...res.entries);
      pageToken = res.nextPageToken;
    } while (pageToken);
    return entries;
  }

  /** Returns what the next model call would receive. */
  async context(sessionId: string): Promise<Context> {
    const res = await this.rpc.getContext({ sessionId });
    if (!res.context) throw new Error("agentd: GetContext returned no context");
    return res.context;
  }

  /** Returns what the next model call would receive with its token accounting (estimates, window, whether it compacts first). */
  async contextReport(sessionId: string): Promise<GetContextResponse> {
    return await this.rpc.getContext({ sessionId });
  }

  /**
   * Changes an idle session: only the fields named, as "config.<field>",
   * "title" or "labels" (snake_case, as in the proto). Model and thinking
   * changes are written to the transcript.
   */
  async updateSession(
    sessionId: string,
    change: { config?: MessageInitShape<typeof SessionConfigSchema>; title?: string; labels?: Record<string, string> },
    paths: string[],
  ): Promise<UpdateSessionResponse> {
    return await this.rpc.updateSession({ sessionId, config: change.config, title: change.title ?? "", labels: change.labels ?? {}, updateMask: { paths } });
  }

  /**
   * Compacts an idle session and returns compaction_end. Pass `summary` to
   * bring your own (no model is called), `dryRun` to see the cut point and
   * token counts only.
   */
  async compact(
    sessionId: string,
    options: { instructions?: string; summary?: string; dryRun?: boolean; keepRecentTokens?: number } = {},
  ): Promise<CompactionEnd> {
    let end: CompactionEnd | undefined;
    for await (const ev of this.rpc.compact({
      sessionId,
      instructions: options.instructions ?? "",
      summary: options.summary ?? "",
      dryRun: options.dryRun ?? false,
      keepRecentTokens: BigInt(options.keepRecentTokens ?? 0),
    })) {
      if (ev.event.case === "compactionEnd") end = ev.event.value;
    }
    if (!end) throw new Error("agentd: Compact ended without compaction_end");
    return end;
  }

  /** Returns the session's whole tree (every page): nodes in append order, with labels and the leaf. */
  async tree(sessionId: string): Promise<{ nodes: TreeNode[]; leafEntryId: string }> {
    const nodes: TreeNode[] = [];
    let pageToken = "";
    let leafEntryId = "";
    do {
      const res = await this.rpc.getTree({ sessionId, pageSize: 1000, pageToken });
      nodes.push(...res.nodes);
      leafEntryId = res.leafEntryId;
      pageToken = res.nextPageToken;
    } while (pageToken);
    return { nodes, leafEntryId };
  }

  /** Returns the entries on the path to `leafEntryId` (any branch), without moving the leaf. */
  async branch(sessionId: string, leafEntryId: string): Promise<Entry[]> {
    const entries: Entry[] = [];
    let pageToken = "";
    do {
      const res = await this.rpc.getTranscript({ sessionId, leafEntryId, pageSize: 1000, pageToken });
      entries.push(...res.entries);
      pageToken = res.nextPageToken;
    } while (pageToken);
    return entries;
  }

  /**
   * Edit and resend: prompts with `content` as a new branch below
   * `parentEntryId` (or as a new root when it is empty), keeping the old branch.
   */
  editAndResend(sessionId: string, parentEntryId: string, content: Content, options: StreamOptions = {}): AsyncIterable<AgentEvent> {
    return this.rpc.prompt(
      { sessionId, content: toContent(content), requestId: options.requestId ?? "", detach: options.detach ?? false, parentEntryId, fromRoot: parentEntryId === "" },
      callOptions(options.signal),
    );
  }

  /** Moves the leaf to `entryId`, with an optional summary of the branch left (yours, or the model's with `summarize`). */
  async navigate(sessionId: string, entryId: string, options: { summary?: string; summarize?: boolean; instructions?: string } = {}): Promise<NavigateResponse> {
    return await this.rpc.navigate({
      sessionId,
      entryId,
      summary: options.summary ?? "",
      summarize: options.summarize ?? false,
      instructions: options.instructions ?? "",
    });
  }

  /** Forks the session at `entryId` (default its leaf) into a new session; `config` overrides the copied configuration. */
  async fork(sessionId: string, entryId = "", options: { config?: MessageInitShape<typeof SessionConfigSchema>; title?: string } = {}): Promise<Session> {
    const res = await this.rpc.forkSession({ sessionId, entryId, config: options.config, title: options.title ?? "" });
    if (!res.session) throw new Error("agentd: ForkSession returned no session");
    return res.session;
  }

  /** Names an entry (empty `label` clears it). */
  async setLabel(sessionId: string, entryId: string, label: string): Promise<void> {
    await this.rpc.setLabel({ sessionId, entryId, label });
  }

  /**
   * Answers a context_requested event: the entries to keep, in order (entry
   * ids as strings), and messages to inject (AgentMessage init objects).
   */
  async submitContext(
    sessionId: string,
    requestId: string,
    items: (string | MessageInitShape<typeof AgentMessageSchema>)[],
  ): Promise<void> {
    await this.rpc.submitContext({
      sessionId,
      requestId,
      items: items.map((it) => (typeof it === "string" ? { item: { case: "entryId" as const, value: it } } : { item: { case: "message" as const, value: it } })),
    });
  }
}

function callOptions(signal: AbortSignal | undefined): CallOptions {
  return signal ? { signal } : {};
}

function toValue(json: JsonValue) {
  return fromJson(ValueSchema, json);
}

function callId(call: ApprovalRequested | string): string {
  return typeof call === "string" ? call : call.toolCallId;
}

// ruleOf builds the request's rule: the suggested one, or the caller's
// with the tool of the call decided when it names none.
function ruleOf(rule: ResolveOptions["rule"], request: ApprovalRequested | undefined): MessageInitShape<typeof ApprovalRuleSchema> | undefined {
  if (rule === undefined) return undefined;
  if (rule === "suggested") {
    if (!request?.suggestedRule) throw new Error("agentd: rule \"suggested\" needs an ApprovalRequested that carries suggested_rule");
    return request.suggestedRule;
  }
  return {
    toolName: rule.toolName ?? request?.toolName ?? "",
    commandPrefix: rule.commandPrefix ?? "",
    pathGlob: rule.pathGlob ?? "",
    reason: rule.reason ?? "",
  };
}
