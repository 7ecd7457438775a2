// The AG-UI and AI SDK streams of a real agentd (--http-listen), read with
// the frameworks' own packages: AG-UI's HttpAgent and event parser from
// @ag-ui/client, and the ai package's parseJsonEventStream,
// uiMessageChunkSchema and readUIMessageStream. The faux model thinks,
// says a text and calls a client tool that needs approval; the client
// approves, sends the tool's result, and reads the answer. Then it reads
// the run again from an id in the middle (Last-Event-ID) and checks that
// the stream continues exactly after it.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";

import { HttpAgent, buildResumeArray, getRunOutcome, runHttpRequest, transformHttpEventStream, verifyEvents } from "@ag-ui/client";
import { EventType, type BaseEvent, type RunFinishedEvent } from "@ag-ui/core";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
  type ChatInit,
  type ChatState,
  type ChatStatus,
  type UIMessage,
  type UIMessageChunk,
} from "ai";

import { ApprovalPolicy, ToolExecutor } from "../../../gen/ts/agentd/v1/session_pb.js";
import { serveAgentd } from "./agentd.js";

const script = {
  responses: [
    {
      content: [
        { block: { case: "thinking" as const, value: { thinking: "the user wants the weather" } } },
        { block: { case: "text" as const, value: { text: "Let me look that up." } } },
        { block: { case: "toolCall" as const, value: { id: "call_1", name: "lookup", arguments: { city: "Paris" } } } },
      ],
    },
    { content: [{ block: { case: "text" as const, value: { text: "It is sunny in Paris." } } }] },
  ],
};
const tools = [
  {
    name: "lookup",
    description: "looks up the weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    executor: ToolExecutor.CLIENT,
    approval: ApprovalPolicy.ASK,
  },
];
// The resume payloads: the JSON of ResolveApprovalRequest and
// SubmitToolResultRequest, as the interrupt's kind says.
const approve = { decision: "APPROVAL_DECISION_ALLOWED" };
const toolReply = { content: [{ text: { text: "sunny, 24°C" } }] };

/** useChat's state, without React: what @ai-sdk/react keeps in hooks. */
class PlainChatState implements ChatState<UIMessage> {
  status: ChatStatus = "ready";
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (m: UIMessage) => void (this.messages = [...this.messages, m]);
  popMessage = () => void (this.messages = this.messages.slice(0, -1));
  replaceMessage = (i: number, m: UIMessage) => void (this.messages = this.messages.map((old, j) => (j === i ? m : old)));
  snapshot = <T,>(thing: T): T => structuredClone(thing);
}

/** The AI SDK's chat (useChat's engine, AbstractChat) over plain state. */
class PlainChat extends AbstractChat<UIMessage> {
  constructor(init: Omit<ChatInit<UIMessage>, "messages">) {
    super({ ...init, state: new PlainChatState() });
  }
  get current(): PlainChatState {
    return this.state as PlainChatState;
  }
}

/** Waits until cond holds, checking every 20 ms, for at most 20 s. */
async function until(what: string, cond: () => boolean): Promise<void> {
  for (const deadline = Date.now() + 20_000; !cond(); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Reads an Observable to its end. */
function collect<T>(source: { subscribe(o: { next(v: T): void; error(e: unknown): void; complete(): void }): unknown }): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const out: T[] = [];
    source.subscribe({ next: (v) => out.push(v), error: reject, complete: () => resolve(out) });
  });
}

/** The SSE ids of a stream, in order (undefined for an event without one). */
async function idsOf(res: Response): Promise<(string | undefined)[]> {
  const ids: (string | undefined)[] = [];
  for (const block of (await res.text()).split("\n\n")) {
    if (!block.includes("data: ") || block.includes("data: [DONE]")) continue;
    ids.push(/^id: (.*)$/m.exec(block)?.[1]);
  }
  return ids;
}

/** AI SDK chunks of a response, parsed by the ai package. */
async function chunksOf(res: Response): Promise<UIMessageChunk[]> {
  const out: UIMessageChunk[] = [];
  const reader = parseJsonEventStream({ stream: res.body!, schema: uiMessageChunkSchema }).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    if (!value.success) throw value.error;
    out.push(value.value as UIMessageChunk);
  }
}

/** A stream of chunks, as readUIMessageStream takes it. */
function streamOf(chunks: UIMessageChunk[]): ReadableStream<UIMessageChunk> {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
}

async function lastMessage(chunks: UIMessageChunk[], message?: UIMessage): Promise<UIMessage> {
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: streamOf(chunks), ...(message ? { message } : {}), terminateOnError: true })) last = m;
  assert.ok(last, "the reader yielded a message");
  return last;
}

describe("UI streams", () => {
  const served = serveAgentd(["--http-listen", "127.0.0.1:0"]);
  const base = () => {
    const m = /msg="http serving[^"]*" addr=(\S+)/.exec(served.agentd.log());
    assert.ok(m, "agentd logs its HTTP address");
    return `http://${m[1]}`;
  };

  test("AG-UI: HttpAgent runs, answers both interrupts, and a Last-Event-ID read continues exactly after it", async () => {
    const session = await served.client.createSession({ faux: script, tools });
    const agent = new HttpAgent({ url: `${base()}/v1/ui/agui`, threadId: session.id });
    agent.addMessage({ id: "u1", role: "user", content: "weather in Paris?" });
    const runs: BaseEvent[][] = [];
    const run = async (params: Parameters<HttpAgent["runAgent"]>[0]) => {
      const events: BaseEvent[] = [];
      await agent.runAgent(params, { onEvent: ({ event }) => void events.push(event) });
      runs.push(events);
      return events.at(-1) as RunFinishedEvent;
    };
    let finished = await run({ runId: "ui-run-1" });
    const types = runs[0]!.map((e) => e.type);
    for (const t of [EventType.RUN_STARTED, EventType.REASONING_START, EventType.REASONING_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_CONTENT, EventType.TOOL_CALL_START, EventType.TOOL_CALL_END]) {
      assert.ok(types.includes(t), `${t} in ${types}`);
    }
    let outcome = getRunOutcome(finished);
    assert.equal(outcome?.type, "interrupt");
    assert.equal(outcome.type === "interrupt" && outcome.interrupts[0]!.reason, "approval");
    assert.equal(outcome.type === "interrupt" && outcome.interrupts[0]!.toolCallId, "call_1");

    const approval = outcome.type === "interrupt" ? outcome.interrupts : [];
    finished = await run({ resume: buildResumeArray(approval, { [approval[0]!.id]: { status: "resolved", payload: approve } }) });
    outcome = getRunOutcome(finished);
    assert.equal(outcome?.type === "interrupt" && outcome.interrupts[0]!.reason, "client_tool");

    finished = await run({ resume: (outcome?.type === "interrupt" ? outcome.interrupts : []).map((i) => ({ interruptId: i.id, status: "resolved" as const, payload: toolReply })) });
    assert.equal(getRunOutcome(finished)?.type ?? "success", "success");
    const answer = runs[2]!.filter((e) => e.type === EventType.TEXT_MESSAGE_CONTENT).map((e) => (e as unknown as { delta: string }).delta).join("");
    assert.equal(answer, "It is sunny in Paris.");
    // HttpAgent applied the events: the conversation is the agent's messages.
    assert.ok(agent.messages.some((m) => m.role === "tool" && m.toolCallId === "call_1"));
    assert.ok(agent.messages.some((m) => m.role === "assistant" && m.content === "It is sunny in Paris."));

    // Read the first stream again by GET; then from an id inside the text.
    const runId = (runs[0]![0] as unknown as { runId: string }).runId;
    const url = `${base()}/v1/ui/agui?sessionId=${session.id}&runId=${runId}`;
    const read = async (lastId?: string) =>
      collect<BaseEvent>(
        transformHttpEventStream(runHttpRequest(() => fetch(url, { headers: lastId ? { "Last-Event-ID": lastId } : {} }))).pipe(verifyEvents(false)),
      );
    const full = await read();
    const ids = await idsOf(await fetch(url));
    assert.equal(ids.length, full.length);
    const k = full.findIndex((e) => e.type === EventType.TEXT_MESSAGE_CONTENT);
    assert.ok(k > 0 && ids[k]);
    const resumed = await read(ids[k]);
    const reopened = resumed.length - (full.length - k - 1);
    assert.deepEqual(resumed.slice(0, reopened).map((e) => e.type), [EventType.RUN_STARTED, EventType.STEP_STARTED, EventType.TEXT_MESSAGE_START], "the open run, step and text message are re-opened");
    assert.deepEqual(resumed.slice(reopened), full.slice(k + 1), "the stream continues exactly after the id");
  });

  test("AI SDK: useChat's own engine (AbstractChat, DefaultChatTransport) answers an approval and a client tool natively, and reconnects", async () => {
    const workspace = mkdtempSync(join(tmpdir(), "agentd-usechat-"));
    after(() => rmSync(workspace, { recursive: true, force: true }));
    const session = await served.client.createSession({
      workspaceRoot: workspace,
      faux: {
        responses: [
          { content: [{ block: { case: "toolCall" as const, value: { id: "w1", name: "write_file", arguments: { path: "a.txt", content: "x" } } } }] },
          { content: [{ block: { case: "toolCall" as const, value: { id: "c1", name: "lookup", arguments: { city: "Paris" } } } }] },
          { content: [{ block: { case: "text" as const, value: { text: "Written, and it is sunny." } } }] },
          { content: [{ block: { case: "toolCall" as const, value: { id: "w2", name: "write_file", arguments: { path: "b.txt", content: "y" } } } }] },
        ],
      },
      tools: [
        { name: "write_file", executor: ToolExecutor.SERVER, approval: ApprovalPolicy.ASK },
        { name: "lookup", description: "looks up the weather", parameters: { type: "object", properties: { city: { type: "string" } } }, executor: ToolExecutor.CLIENT },
      ],
    });
    const chat: PlainChat = new PlainChat({
      id: session.id,
      transport: new DefaultChatTransport({ api: `${base()}/v1/ui/aisdk` }),
      sendAutomaticallyWhen: (opts) => lastAssistantMessageIsCompleteWithApprovalResponses(opts) || lastAssistantMessageIsCompleteWithToolCalls(opts),
      // A client tool runs in the page: useChat's onToolCall, answered with addToolOutput.
      onToolCall: ({ toolCall }) => {
        if (toolCall.toolName === "lookup") void chat.addToolOutput({ tool: "lookup", toolCallId: toolCall.toolCallId, output: "sunny, 24°C" });
      },
    });
    const part = (id: string) => chat.current.messages.at(-1)?.parts.find((p) => "toolCallId" in p && p.toolCallId === id) as { state: string; approval?: { id: string }; output?: unknown } | undefined;

    await chat.sendMessage({ text: "write a.txt, then the weather" });
    await until("the approval request", () => part("w1")?.state === "approval-requested" && chat.current.status === "ready");
    await chat.addToolApprovalResponse({ id: part("w1")!.approval!.id, approved: true });
    await until("the answer", () => chat.current.status === "ready" && /sunny/.test(JSON.stringify(chat.current.messages.at(-1)?.parts ?? [])) && part("c1")?.state === "output-available");
    assert.equal(chat.current.error, undefined);
    const last = chat.current.messages.at(-1)!;
    assert.equal(last.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text).join(""), "Written, and it is sunny.");
    assert.equal(part("w1")!.state, "output-available", "the server tool ran after the approval");
    assert.equal(readFileSync(join(workspace, "a.txt"), "utf8"), "x");
    const stored = await served.client.transcript(session.id);
    const results = stored.flatMap((e) => (e.payload.case === "message" && e.payload.value.kind.case === "toolResult" ? [e.payload.value.kind.value] : []));
    assert.deepEqual(results.map((r) => [r.toolCallId, r.isError]), [["w1", false], ["c1", false]]);
    assert.match(results[1]!.content.map((b) => (b.block.case === "text" ? b.block.value.text : "")).join(""), /sunny, 24°C/);

    // The same answers again (nothing new) are refused, not streamed in a loop.
    const again = await fetch(`${base()}/v1/ui/aisdk`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ id: session.id, messages: chat.current.messages }) });
    const againBody = await again.text();
    assert.equal(again.status, 400, `the run that asked is over: ${againBody}`);
    assert.equal((JSON.parse(againBody) as { error: { reason: string } }).error.reason, "RUN_NOT_ACTIVE");

    // useChat's reconnect (resumeStream): nothing streams now, so 204.
    const idle = await fetch(`${base()}/v1/ui/aisdk/${session.id}/stream`);
    assert.equal(idle.status, 204);
    // While a run waits (for the approval of w2), the reconnect streams it
    // from its first event to the wait.
    const run = served.client.prompt(session.id, "once more")[Symbol.asyncIterator]();
    await run.next();
    const live = await fetch(`${base()}/v1/ui/aisdk/${session.id}/stream`);
    assert.equal(live.status, 200);
    const chunks = await chunksOf(live);
    assert.equal(chunks[0]!.type, "start");
    assert.equal(chunks.at(-1)!.type, "finish");
    assert.ok(chunks.some((c) => c.type === "tool-approval-request"));
    await run.return?.(); // the stream was not detached: this aborts the run
  });

  test("AI SDK: the ai package reads the message, the approval request, the answer and a resumed stream", async () => {
    const session = await served.client.createSession({ faux: script, tools });
    const url = `${base()}/v1/ui/aisdk`;
    const post = (body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

    const res = await post({ sessionId: session.id, text: "weather in Paris?", requestId: "r1" });
    assert.equal(res.headers.get("x-vercel-ai-ui-message-stream"), "v1");
    const first = await chunksOf(res);
    let message = await lastMessage(first);
    assert.deepEqual(message.parts.filter((p) => p.type !== "step-start").map((p) => p.type), ["reasoning", "text", "tool-lookup", "data-agentd-interrupt"]);
    const tool = message.parts.find((p) => p.type === "tool-lookup") as { state: string; input: unknown; approval?: { id: string } };
    assert.equal(tool.state, "approval-requested");
    assert.deepEqual(tool.input, { city: "Paris" });
    const approvalId = tool.approval!.id;

    const second = await chunksOf(await post({ sessionId: session.id, resume: [{ interruptId: approvalId, status: "resolved", payload: approve }] }));
    message = await lastMessage(second, message);
    const wait = second.find((c) => c.type === "data-agentd-interrupt") as { data: { id: string; kind: string } };
    assert.equal(wait.data.kind, "client_tool");

    const third = await chunksOf(await post({ sessionId: session.id, resume: [{ interruptId: wait.data.id, status: "resolved", payload: toolReply }] }));
    message = await lastMessage(third, message);
    const done = message.parts.find((p) => p.type === "tool-lookup") as { state: string; output: { text: string } };
    assert.equal(done.state, "output-available");
    assert.equal(done.output.text, "sunny, 24°C");
    assert.equal(message.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text).join(" "), "Let me look that up. It is sunny in Paris.");
    const finish = third.at(-1) as { type: string; messageMetadata: { outcome: string; runId: string } };
    assert.equal(finish.type, "finish");
    assert.equal(finish.messageMetadata.outcome, "RUN_OUTCOME_COMPLETED");

    // Resume the first stream from inside its text with Last-Event-ID.
    const get = `${url}?sessionId=${session.id}&runId=${finish.messageMetadata.runId}`;
    const ids = await idsOf(await fetch(get));
    const k = first.findIndex((c) => c.type === "text-delta");
    assert.equal(ids.length, first.length);
    const resumed = await chunksOf(await fetch(get, { headers: { "Last-Event-ID": ids[k]! } }));
    const reopened = resumed.length - (first.length - k - 1);
    assert.deepEqual(resumed.slice(0, reopened).map((c) => c.type), ["start", "start-step", "text-start"]);
    assert.deepEqual(resumed.slice(reopened), first.slice(k + 1));
    // The ai package's reader takes the resumed stream as it is.
    const again = await lastMessage(resumed);
    assert.ok(again.parts.some((p) => p.type === "tool-lookup"));
  });
});
