// Unit tests of the ChatItem reducer over hand-built event sequences, for the
// paths a live run reaches only with specific server features (approvals,
// hook notices, joins mid-run) and for purity.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { create, type MessageInitShape } from "@bufbuild/protobuf";

import { applyEvent, emptyChat, emptyConversation, itemsFromTranscript, reduceChat, setDraft, toggleCollapsed, type ChatState } from "../src/reducer.js";
import { ApprovalDecision, EntrySchema, HookAction, HookEvent } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import { StopReason } from "../../../gen/ts/agentd/v1/content_pb.js";
import { AgentEventSchema, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";

type EventInit = MessageInitShape<typeof AgentEventSchema>["event"];

function run(...events: EventInit[]): AgentEvent[] {
  return events.map((event, i) => create(AgentEventSchema, { sessionId: "s", runId: "r", seq: BigInt(i + 1), event }));
}
const txt = (text: string) => ({ block: { case: "text" as const, value: { text } } });
const user = (text: string): EventInit[] => [
  { case: "messageStart", value: { message: { kind: { case: "user", value: { content: [txt(text)] } } } } },
  { case: "messageEnd", value: { message: { kind: { case: "user", value: { content: [txt(text)] } } }, entryId: `e-${text}` } },
];
const assistantStart: EventInit = { case: "messageStart", value: { message: { kind: { case: "assistant", value: {} } } } };
const delta = (d: string): EventInit => ({ case: "messageUpdate", value: { delta: { case: "textDelta", value: { delta: d } } } });
const assistantEnd = (text: string, stopReason = StopReason.STOP, errorMessage = ""): EventInit => ({
  case: "messageEnd",
  value: { message: { kind: { case: "assistant", value: { content: [txt(text)], stopReason, errorMessage } } }, entryId: "e-a" },
});
const notice = (decision: ApprovalDecision): EventInit[] => {
  const message = { kind: { case: "approvalNotice" as const, value: { toolCallId: "c1", toolName: "edit_file", decision, decidedBy: "alice", reason: "ok", visibleInUi: true } } };
  return [
    { case: "messageStart", value: { message } },
    { case: "messageEnd", value: { message, entryId: "e-n" } },
  ];
};

describe("reduceChat", () => {
  test("a hook's decision is one card, live and in a reopened transcript; an invisible one none", () => {
    const hookNotice = (requestId: string, visibleInUi: boolean) => ({
      kind: {
        case: "hookNotice" as const,
        value: { requestId, event: HookEvent.PRE_TOOL_USE, hook: "shell", action: HookAction.DENIED, reason: "no rm", decidedBy: "policy", toolCallId: "c1", toolName: "bash", visibleInUi },
      },
    });
    const live = run(
      { case: "messageStart", value: { message: hookNotice("h1", true) } },
      { case: "messageEnd", value: { message: hookNotice("h1", true), entryId: "e-h1" } },
      { case: "messageStart", value: { message: hookNotice("h2", false) } },
      { case: "messageEnd", value: { message: hookNotice("h2", false), entryId: "e-h2" } },
    ).reduce(reduceChat, emptyChat);
    assert.deepEqual(live.items, [
      { kind: "hook", id: "r/1", entryId: "e-h1", requestId: "h1", event: "pre_tool_use", hook: "shell", action: "denied", reason: "no rm", decidedBy: "policy", toolCallId: "c1", toolName: "bash" },
    ]);
    const reopened = itemsFromTranscript([create(EntrySchema, { id: "e-h1", payload: { case: "message", value: hookNotice("h1", true) } })]);
    assert.deepEqual(reopened.map(({ id: _id, ...rest }) => rest), live.items.map(({ id: _id, ...rest }) => rest));
  });

  test("message_update replaces the streaming card in place", () => {
    const events = run(...user("hi"), assistantStart, delta("默认"), delta("端口"), assistantEnd("默认端口"));
    const states: ChatState[] = [];
    events.reduce((s, e) => (states.push(reduceChat(s, e)), states.at(-1)!), emptyChat);
    assert.deepEqual(
      states.map((s) => s.items.map((it) => ("text" in it ? `${it.kind}:${it.text}:${"isStreaming" in it ? it.isStreaming : "-"}` : it.kind))),
      [
        ["user:hi:-"],
        ["user:hi:-"],
        ["user:hi:-", "assistant::true"],
        ["user:hi:-", "assistant:默认:true"],
        ["user:hi:-", "assistant:默认端口:true"],
        ["user:hi:-", "assistant:默认端口:false"],
      ],
    );
    const first = states.at(-1)!.items[0]!;
    assert.equal(first.kind === "user" && first.entryId, "e-hi");
  });

  for (const [name, decision, want] of [
    ["allowed", ApprovalDecision.ALLOWED, "allowed"],
    ["denied", ApprovalDecision.DENIED, "denied"],
    ["timed out", ApprovalDecision.TIMED_OUT, "timed_out"],
  ] as const) {
    test(`an approval item appears pending and resolves as ${name}`, () => {
      const requested: EventInit = { case: "approvalRequested", value: { toolCallId: "c1", toolName: "edit_file", arguments: { path: "a.ts" } } };
      const events = run(requested, ...notice(decision));
      const pending = reduceChat(emptyChat, events[0]!);
      assert.deepEqual(pending.items.map((it) => it.kind === "approval" && [it.label, it.decision]), [['edit_file {"path":"a.ts"}', "pending"]]);
      const done = events.reduce(reduceChat, emptyChat);
      assert.equal(done.items.length, 1, "the notice resolves the item instead of adding one");
      const item = done.items[0]!;
      assert.ok(item.kind === "approval");
      assert.deepEqual([item.decision, item.decidedBy, item.reason], [want, "alice", "ok"]);
    });
  }

  test("tool cards go running → success and keep the result text", () => {
    const result = { toolCallId: "c1", toolName: "read_file", content: [txt("port: 3000")] };
    const events = run(
      { case: "toolExecutionStart", value: { toolCallId: "c1", toolName: "read_file", arguments: { path: "src/config.ts" } } },
      { case: "toolExecutionEnd", value: { result } },
      { case: "messageStart", value: { message: { kind: { case: "toolResult", value: result } } } },
      { case: "messageEnd", value: { message: { kind: { case: "toolResult", value: result } }, entryId: "e-t" } },
    );
    const states = events.map((_, i) => events.slice(0, i + 1).reduce(reduceChat, emptyChat));
    assert.deepEqual(states.map((s) => s.items.map((it) => it.kind === "tool" && it.state)), [["running"], ["success"], ["success"], ["success"]]);
    const card = states.at(-1)!.items[0]!;
    assert.ok(card.kind === "tool");
    assert.deepEqual([card.output, card.entryId], ["port: 3000", "e-t"]);
  });

  test("a tool card shows its latest progress while it runs, then the result's details (screen-only data)", () => {
    const details = { kind: { case: "structValue" as const, value: { fields: { path: { kind: { case: "stringValue" as const, value: "src/config.ts" } }, diff: { kind: { case: "stringValue" as const, value: "-a\n+b" } } } } } };
    const result = { toolCallId: "c1", toolName: "edit_file", content: [txt("replaced")], details };
    const events = run(
      { case: "toolExecutionStart", value: { toolCallId: "c1", toolName: "edit_file", arguments: { path: "src/config.ts" } } },
      { case: "toolExecutionUpdate", value: { toolCallId: "c1", toolName: "edit_file", content: [txt("10%")] } },
      { case: "toolExecutionUpdate", value: { toolCallId: "c1", toolName: "edit_file", content: [txt("90%")] } },
      { case: "toolExecutionEnd", value: { result } },
    );
    const states = events.map((_, i) => events.slice(0, i + 1).reduce(reduceChat, emptyChat));
    const cards = states.map((s) => s.items[0]!);
    assert.deepEqual(cards.map((c) => c.kind === "tool" && [c.toolName, c.state, c.progress]), [
      ["edit_file", "running", ""],
      ["edit_file", "running", "10%"],
      ["edit_file", "running", "90%"],
      ["edit_file", "success", "90%"],
    ]);
    const last = cards.at(-1)!;
    assert.ok(last.kind === "tool");
    assert.deepEqual(last.details, { path: "src/config.ts", diff: "-a\n+b" });
    assert.equal(cards[0]!.kind === "tool" && cards[0]!.details, undefined);
    // The same progress twice changes nothing: the card is not redrawn.
    const again = reduceChat(states[2]!, run({ case: "toolExecutionUpdate", value: { toolCallId: "c1", toolName: "edit_file", content: [txt("90%")] } })[0]!);
    assert.equal(again.items[0], states[2]!.items[0]);
  });

  test("a failed answer and an aborted run leave no card streaming", () => {
    const failed = run(assistantStart, delta("部分"), assistantEnd("部分", StopReason.ERROR, "rate limited")).reduce(reduceChat, emptyChat);
    assert.deepEqual(failed.items.map((it) => it.kind === "assistant" && [it.isStreaming, it.error]), [[false, "rate limited"]]);
    const cut = run(assistantStart, delta("部分"), { case: "agentEnd", value: {} }).reduce(reduceChat, emptyChat);
    assert.deepEqual(cut.items.map((it) => it.kind === "assistant" && [it.isStreaming, it.text]), [[false, "部分"]]);
  });

  test("reducing never mutates the previous state", () => {
    const events = run(...user("hi"), assistantStart, delta("a"), assistantEnd("a"));
    let state = emptyChat;
    for (const e of events) {
      const before = JSON.stringify(state.items);
      const frozen = state;
      state = reduceChat(state, e);
      assert.equal(JSON.stringify(frozen.items), before);
    }
  });
});

describe("UI state stays outside the transcript", () => {
  test("drafts and collapsed cards never reach the transcript or the items, and events never touch them", () => {
    let conv = emptyConversation;
    conv = { ...conv, ui: toggleCollapsed(setDraft(conv.ui, "把它改成 8080"), "r/3") };
    const ui = conv.ui;
    for (const e of run(...user("hi"), assistantStart, delta("a"), assistantEnd("a"))) conv = applyEvent(conv, e);
    assert.equal(conv.ui, ui, "the same UI state object after every event");
    assert.equal(conv.transcript.length, 2);
    assert.doesNotMatch(JSON.stringify(conv.transcript, (_k, v) => (typeof v === "bigint" ? String(v) : v)), /8080|collapsed|draft/);
    assert.doesNotMatch(JSON.stringify(conv.chat.items), /8080/);
    assert.deepEqual([...toggleCollapsed(ui, "r/3").collapsed], [], "toggling twice expands again");
  });
});
