// End-to-end tests of the TypeScript client against a real agentd started on
// a free port with a temporary database, the faux model scripted per session.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { equals, type MessageInitShape } from "@bufbuild/protobuf";

import { Code } from "@connectrpc/connect";

import { AgentdClient, refusalOf } from "../src/client.js";
import { connect } from "../src/node.js";
import { applyEvent, emptyChat, emptyConversation, itemsFromTranscript, reduceChat, type ChatItem, type ChatState } from "../src/reducer.js";
import { AgentMessageSchema, type Entry } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import { RunOutcome, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";
import { ErrorReason } from "../../../gen/ts/agentd/v1/service_pb.js";
import type { SessionConfigSchema } from "../../../gen/ts/agentd/v1/session_pb.js";
import { startAgentd, type Agentd } from "./agentd.js";

type Config = MessageInitShape<typeof SessionConfigSchema>;

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
const call = (id: string, name: string, args: Record<string, unknown>) => ({
  content: [{ block: { case: "toolCall" as const, value: { id, name, arguments: args as never } } }],
});

async function collect(stream: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

function reduceAll(events: AgentEvent[], state: ChatState = emptyChat): ChatState {
  return events.reduce(reduceChat, state);
}

// view drops the ids, which differ between a live run and a rebuilt transcript.
function view(items: readonly ChatItem[]) {
  return items.map((it) => {
    const { id: _id, ...rest } = it;
    return rest;
  });
}

// shape also drops the entry ids, to compare runs of different sessions.
function shape(items: readonly ChatItem[]) {
  return items.map((it) => {
    const { id: _id, ...rest } = it;
    return { ...rest, entryId: undefined };
  });
}

function assertSeqs(events: AgentEvent[]) {
  assert.deepEqual(
    events.map((e) => e.seq),
    events.map((_, i) => BigInt(i + 1)),
    "seq runs 1..N exactly once",
  );
}

describe("agentd TypeScript client", () => {
  let agentd: Agentd;
  let client: AgentdClient;

  before(async () => {
    agentd = await startAgentd();
    client = connect({ address: agentd.address });
  });

  after(async () => {
    client?.close();
    const code = await agentd?.stop();
    assert.equal(code, 0, `agentd exit code; log:\n${agentd?.log()}`);
    assert.match(agentd.log(), /agentd stopped/);
  });

  test("a streamed answer is one card that grows in place, and the transcript decodes to the same messages", async () => {
    const answer = "默认端口是 3000。它在 src/config.ts 的 port 字段里定义。";
    const session = await client.createSession({ systemPrompt: "你是桌面开发助手。", faux: { responses: [text(answer), text("好的。")] } });
    const events = [
      ...(await collect(client.prompt(session.id, "读取 src/config.ts，告诉我默认端口。"))),
      ...(await collect(client.prompt(session.id, "谢谢"))),
    ];
    const updates = events.filter((e) => e.event.case === "messageUpdate" && e.event.value.delta.case === "textDelta");
    assert.ok(updates.length > 1, `the answer streams in several deltas, got ${updates.length}`);

    // Every intermediate state has exactly one assistant card per answer started so far.
    let state = emptyChat;
    for (const e of events) {
      state = reduceChat(state, e);
      const starts = events.filter((x) => x.seq <= e.seq && x.runId === e.runId && x.event.case === "messageStart" && x.event.value.message?.kind.case === "assistant").length;
      const cardsOfRun = state.items.filter((it) => it.kind === "assistant" && it.id.startsWith(e.runId + "/")).length;
      assert.equal(cardsOfRun, starts, `after seq ${e.seq} (${e.event.case})`);
    }
    assert.deepEqual(
      state.items.map((it) => [it.kind, "text" in it ? it.text : "", "isStreaming" in it ? it.isStreaming : false]),
      [
        ["user", "读取 src/config.ts，告诉我默认端口。", false],
        ["assistant", answer, false],
        ["user", "谢谢", false],
        ["assistant", "好的。", false],
      ],
    );

    // GetTranscript returns the stored protobuf entries: the same messages
    // message_end carried, in order, with the same entry ids.
    const ends = events.flatMap((e) => (e.event.case === "messageEnd" ? [e.event.value] : []));
    const entries = await client.transcript(session.id);
    const stored = entries.flatMap((en) => (en.payload.case === "message" ? [en] : []));
    assert.equal(stored.length, ends.length);
    stored.forEach((en, i) => {
      assert.equal(en.id, ends[i]!.entryId);
      assert.ok(equals(AgentMessageSchema, en.payload.value as never, ends[i]!.message!), `entry ${i} equals its message_end`);
    });
    assert.deepEqual(view(itemsFromTranscript(entries)), view(state.items), "a reopened transcript shows the same items");
  });

  test("compaction, a session update and the context hook through the client helpers; the compaction shows as one card", async () => {
    const session = await client.createSession({
      faux: { echo: true, contextWindow: 4000n },
      compaction: { reserveTokens: 1000n, keepRecentTokens: 400n },
      contextHook: { timeout: { seconds: 5n }, includeMessages: false },
    });
    const long = "lorem ipsum ".repeat(100);
    // Each prompt's context waits for the hook: keep what the policies offered and add a note.
    const run = async (text: string) => {
      const events: AgentEvent[] = [];
      for await (const e of client.prompt(session.id, text)) {
        events.push(e);
        if (e.event.case === "contextRequested") {
          const ids = e.event.value.items.map((it) => it.entryId);
          await client.submitContext(session.id, e.event.value.requestId, [...ids, { kind: { case: "user", value: { content: [{ block: { case: "text", value: { text: "note" } } }] } } }]);
        }
      }
      return events;
    };
    const events: AgentEvent[] = [];
    for (let i = 0; i < 14; i++) events.push(...(await run(`${i} ${long}`)));
    assert.ok(events.some((e) => e.event.case === "contextRequested"), "the hook was asked");
    const answers = events.flatMap((e) => (e.event.case === "messageEnd" && e.event.value.message?.kind.case === "assistant" ? [e.event.value.message.kind.value] : []));
    assert.ok(answers.every((a) => a.content[0]?.block.case === "text" && a.content[0].block.value.text === "note"), "the model saw the injected note last");
    const cards = events.reduce(reduceChat, emptyChat).items.filter((it) => it.kind === "compaction");
    assert.ok(cards.length >= 1, "automatic compaction happened");
    assert.ok(cards.every((c) => c.kind === "compaction" && c.state === "done" && c.reason === "threshold" && c.entryId !== "" && c.tokensAfter < c.tokensBefore));

    const report = await client.contextReport(session.id);
    assert.equal(report.contextWindow, 4000n);
    assert.ok(report.totalTokens <= 4000n);
    const dry = await client.compact(session.id, { dryRun: true, keepRecentTokens: 100 });
    assert.ok(dry.dryRun && dry.firstKeptEntryId !== "");
    const end = await client.compact(session.id, { summary: "my summary", keepRecentTokens: 100 });
    assert.ok(end.entryId !== "" && end.summary?.summary === "my summary");
    const entries = await client.transcript(session.id);
    assert.ok(itemsFromTranscript(entries).some((it) => it.kind === "compaction" && it.summary === "my summary"), "a reopened transcript shows the compaction card");

    const updated = await client.updateSession(session.id, { config: { thinkingLevel: 5, systemPrompt: "be brief" } }, ["config.thinking_level", "config.system_prompt"]);
    assert.equal(updated.entries.length, 1);
    assert.equal(updated.entries[0]!.payload.case, "thinkingLevelChange");
    assert.equal((await client.context(session.id)).systemPrompt, "be brief");
  });

  test("branches through the client helpers: edit and resend, navigate, fork, labels; the reducer rebuilds any branch", async () => {
    const session = await client.createSession({ faux: { echo: true } });
    await collect(client.prompt(session.id, "one"));
    await collect(client.prompt(session.id, "two"));
    const main = await client.transcript(session.id);
    await collect(client.editAndResend(session.id, main[1]!.id, "two, edited"));
    const cards = (entries: Entry[]) => itemsFromTranscript(entries).map((it) => ("text" in it ? `${it.kind}:${it.text}` : it.kind));
    assert.deepEqual(cards(await client.transcript(session.id)), ["user:one", "assistant:one", "user:two, edited", "assistant:two, edited"]);
    assert.deepEqual(cards(await client.branch(session.id, main[3]!.id)), ["user:one", "assistant:one", "user:two", "assistant:two"], "the old branch, read without moving the leaf");
    await collect(client.editAndResend(session.id, "", "one, edited"));
    assert.deepEqual(cards(await client.transcript(session.id)), ["user:one, edited", "assistant:one, edited"], "a new root");
    const nav = await client.navigate(session.id, main[3]!.id, { summary: "tried a new root" });
    assert.equal(nav.branchSummary?.payload.case, "message");
    await client.setLabel(session.id, main[0]!.id, "start");
    const { nodes, leafEntryId } = await client.tree(session.id);
    assert.equal(nodes.filter((n) => n.parentId === "").length, 2);
    assert.equal(nodes.find((n) => n.id === main[0]!.id)?.label, "start");
    assert.equal(nodes.find((n) => n.isLeaf)?.id, leafEntryId);
    const fork = await client.fork(session.id, main[1]!.id, { title: "fork" });
    assert.equal(fork.origin?.sessionId, session.id);
    assert.deepEqual(cards(await client.transcript(fork.id)), ["user:one", "assistant:one"]);
  });

  test("tool cards move running → error for a tool the session does not declare, and the run goes on", async () => {
    const session = await client.createSession({ faux: { responses: [call("call_1", "lookup", { key: "port" }), text("没有这个工具。")] } });
    const events = await collect(client.prompt(session.id, "查一下端口"));
    assertSeqs(events);
    const end = events.at(-1)!;
    assert.equal(end.event.case, "agentEnd");
    assert.equal(end.event.case === "agentEnd" && end.event.value.outcome, RunOutcome.COMPLETED);

    const startIdx = events.findIndex((e) => e.event.case === "toolExecutionStart");
    assert.ok(startIdx > 0, "tool_execution_start was streamed");
    const running = reduceAll(events.slice(0, startIdx + 1)).items.find((it) => it.kind === "tool");
    assert.equal(running?.kind === "tool" && running.state, "running");
    const items = reduceAll(events).items;
    assert.deepEqual(items.map((it) => it.kind), ["user", "assistant", "tool", "assistant"]);
    const tool = items[2]!;
    assert.ok(tool.kind === "tool");
    assert.equal(tool.state, "error");
    assert.equal(tool.toolCallId, "call_1");
    assert.match(tool.label, /^lookup \{"key":"port"\}$/);
    assert.match(tool.output, /lookup/);
    assert.notEqual(tool.entryId, "", "the tool result's entry id is on the card");
    assert.deepEqual(view(itemsFromTranscript(await client.transcript(session.id))), view(items));
  });

  test("steering during a run becomes a user card before the next answer", async () => {
    // 20 tokens per second keeps the first answer streaming long enough to steer.
    const session = await client.createSession({
      faux: { responses: [text("这是一段比较长的回答，".repeat(8)), text("已改用 8080。")], tokensPerSecond: 20 },
    });
    let conv = emptyConversation;
    let steered = false;
    for await (const e of client.prompt(session.id, "介绍一下配置")) {
      conv = applyEvent(conv, e);
      if (!steered && e.event.case === "messageUpdate") {
        steered = true;
        assert.equal(await client.steer(session.id, "改成 8080"), 1);
      }
    }
    assert.deepEqual(
      conv.chat.items.map((it) => [it.kind, "text" in it ? it.text : ""]),
      [
        ["user", "介绍一下配置"],
        ["assistant", "这是一段比较长的回答，".repeat(8)],
        ["user", "改成 8080"],
        ["assistant", "已改用 8080。"],
      ],
    );
    assert.equal(conv.transcript.length, 4, "every committed message is in the transcript");
    assert.equal(conv.ui, emptyConversation.ui, "events never touch the UI state");
    // Once the run ended, steering is refused with a typed reason.
    const refused = await client.steer(session.id, "too late").then(
      () => undefined,
      (err: unknown) => refusalOf(err),
    );
    assert.equal(refused?.reason, ErrorReason.RUN_NOT_ACTIVE);
    assert.equal(refused?.reasonName, "RUN_NOT_ACTIVE");
    assert.equal(refused?.metadata["session_id"], session.id);
    assert.equal(refused?.code, Code.FailedPrecondition);
  });

  test("a dropped detached stream resumes with Attach without missing or duplicating an event", async () => {
    const script: Config = { faux: { responses: [call("call_1", "lookup", {}), text("一二三四五六七八九十".repeat(6))], tokensPerSecond: 200 } };
    const reference = await collect(client.prompt((await client.createSession(script)).id, "开始"));
    assertSeqs(reference);

    const session = await client.createSession(script);
    const seen: AgentEvent[] = [];
    for await (const e of client.prompt(session.id, "开始", { detach: true })) {
      seen.push(e);
      if (seen.length === 5) break; // drops the stream; the detached run goes on
    }
    assert.ok(!seen.some((e) => e.event.case === "agentEnd"), "the stream was dropped before the run ended");
    const rest = await collect(client.attach(session.id, { runId: seen[0]!.runId, afterSeq: seen.at(-1)!.seq }));
    assert.equal(rest[0]?.seq, 6n, "Attach starts right after the last seq seen");
    const all = [...seen, ...rest];
    assertSeqs(all);
    assert.deepEqual(all.map((e) => e.event.case), reference.map((e) => e.event.case));
    assert.equal(new Set(all.map((e) => e.runId)).size, 1);
    assert.deepEqual(shape(reduceAll(all).items), shape(reduceAll(reference).items));
  });

  test("resume() re-joins a run after a transport error mid-stream", async () => {
    const script: Config = { faux: { responses: [text("甲乙丙丁戊己庚辛壬癸".repeat(6))], tokensPerSecond: 200 } };
    const reference = await collect(client.prompt((await client.createSession(script)).id, "开始"));
    const session = await client.createSession(script);
    const controller = new AbortController();
    // A stream that breaks like a lost connection after four events.
    async function* flaky(): AsyncGenerator<AgentEvent> {
      let n = 0;
      for await (const e of client.prompt(session.id, "开始", { detach: true, signal: controller.signal })) {
        yield e;
        if (++n === 4) {
          controller.abort();
          const { ConnectError, Code } = await import("@connectrpc/connect");
          throw new ConnectError("connection lost", Code.Unavailable);
        }
      }
    }
    const all = await collect(client.resume(session.id, flaky()));
    assertSeqs(all);
    assert.deepEqual(all.map((e) => e.event.case), reference.map((e) => e.event.case));
    const items = reduceAll(all).items;
    assert.deepEqual(shape(items), shape(reduceAll(reference).items));
  });
});
