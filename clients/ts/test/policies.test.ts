// End-to-end tests of the policy helpers against a real agentd: a
// PRE_TOOL_USE hook answered with onPreToolUse, and an approval resolved
// with scope "session" whose rule decides the next run's call unasked.
// bash runs in agentd's sandbox inside a temporary workspace.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { onPreToolUse, verdict } from "../src/hooks.js";
import { emptyChat, itemsFromTranscript, reduceChat, textOf, type ChatItem } from "../src/reducer.js";
import { ApprovalDecision, ApprovalScope, HookAction, HookEvent, type Entry } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import type { AgentEvent, ApprovalRequested, HookRequested } from "../../../gen/ts/agentd/v1/events_pb.js";
import type { ToolResultMessage } from "../../../gen/ts/agentd/v1/messages_pb.js";
import { ApprovalPolicy, HookTimeoutAction } from "../../../gen/ts/agentd/v1/session_pb.js";
import { serveAgentd } from "./agentd.js";

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
const bash = (id: string, command: string) => ({
  content: [{ block: { case: "toolCall" as const, value: { id, name: "bash", arguments: { command } } } }],
});

// results maps each tool call id to the result its run ended with.
function results(events: AgentEvent[]): Map<string, ToolResultMessage> {
  const out = new Map<string, ToolResultMessage>();
  for (const e of events) if (e.event.case === "toolExecutionEnd" && e.event.value.result) out.set(e.event.value.result.toolCallId, e.event.value.result);
  return out;
}

function ofCase<C extends NonNullable<AgentEvent["event"]["case"]>>(events: AgentEvent[], c: C) {
  return events.flatMap((e) => (e.event.case === c ? [e.event.value as Extract<AgentEvent["event"], { case: C }>["value"]] : []));
}

function hookNotices(entries: Entry[]) {
  return entries.flatMap((en) => (en.payload.case === "message" && en.payload.value.kind.case === "hookNotice" ? [en.payload.value.kind.value] : []));
}

function approvalNotices(entries: Entry[]) {
  return entries.flatMap((en) => (en.payload.case === "message" && en.payload.value.kind.case === "approvalNotice" ? [en.payload.value.kind.value] : []));
}

async function drain(stream: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

describe("policies your app enforces", () => {
  const served = serveAgentd();
  const workspaces: string[] = [];
  // newWorkspace makes a fresh workspace holding keep.txt.
  const newWorkspace = () => {
    const dir = mkdtempSync(join(tmpdir(), "agentd-ts-ws-"));
    writeFileSync(join(dir, "keep.txt"), "keep");
    workspaces.push(dir);
    return dir;
  };

  after(() => {
    for (const dir of workspaces) rmSync(dir, { recursive: true, force: true });
  });

  test("a PRE_TOOL_USE hook rewrites one bash call and denies another; the model sees both outcomes and the transcript says why", async () => {
    const workspace = newWorkspace();
    const session = await served.client.createSession({
      workspaceRoot: workspace,
      tools: [{ name: "bash", approval: ApprovalPolicy.ALLOW }],
      hooks: [{ event: HookEvent.PRE_TOOL_USE, toolPattern: "bash", name: "shell-policy", timeout: { seconds: 30n }, onTimeout: HookTimeoutAction.DENY }],
      faux: { responses: [bash("call_1", "echo secret > leaked.txt"), bash("call_2", "rm -rf ."), text("done")] },
    });
    const asked: HookRequested[] = [];
    const policy = onPreToolUse((args, request) => {
      asked.push(request);
      const command = String(args["command"] ?? "");
      if (command.startsWith("rm ")) return verdict.deny("rm is not allowed here", { decidedBy: "policy", includeInModelContext: true });
      return verdict.modify({ arguments: { command: "echo rewritten" }, reason: "no writes", decidedBy: "policy" });
    });
    const events = await drain(served.client.handle(session.id, served.client.prompt(session.id, "clean up"), { hooks: [policy] }));

    assert.deepEqual(
      asked.map((r) => [r.event, r.hook, r.toolCall?.id, r.toolCall?.name]),
      [
        [HookEvent.PRE_TOOL_USE, "shell-policy", "call_1", "bash"],
        [HookEvent.PRE_TOOL_USE, "shell-policy", "call_2", "bash"],
      ],
    );
    assert.ok(asked.every((r) => r.requestId !== "" && r.deadline !== undefined), "each request has an id and a deadline");
    const end = ofCase(events, "agentEnd")[0];
    assert.ok(end, "the run ended");
    assert.ok(!ofCase(events, "error").some((e) => /hook/i.test(e.stage)), "no hook error: both were answered in time");

    const byCall = results(events);
    assert.equal(textOf(byCall.get("call_1")!.content).trim(), "rewritten", "the call ran with the hook's arguments");
    assert.equal(byCall.get("call_1")!.isError, false);
    assert.ok(!existsSync(join(workspace, "leaked.txt")), "the model's command never ran");
    assert.equal(byCall.get("call_2")!.isError, true, "the denied call is an error result");
    assert.match(textOf(byCall.get("call_2")!.content), /rm is not allowed here/);
    assert.ok(existsSync(join(workspace, "keep.txt")), "rm never ran");

    // What the model sees next: both results, the reason included.
    const context = await served.client.context(session.id);
    const toolTexts = context.messages.flatMap((m) => (m.role.case === "toolResult" ? [textOf(m.role.value.content)] : []));
    assert.equal(toolTexts.length, 2);
    assert.equal(toolTexts[0]!.trim(), "rewritten");
    assert.match(toolTexts[1]!, /rm is not allowed here/);

    // The transcript records each decision other than ALLOW as a HookNotice.
    const entries = await served.client.transcript(session.id);
    const notices = hookNotices(entries);
    assert.deepEqual(
      notices.map((n) => [n.event, n.hook, n.action, n.toolCallId, n.toolName, n.decidedBy, n.includeInModelContext]),
      [
        [HookEvent.PRE_TOOL_USE, "shell-policy", HookAction.ARGUMENTS_REPLACED, "call_1", "bash", "policy", false],
        [HookEvent.PRE_TOOL_USE, "shell-policy", HookAction.DENIED, "call_2", "bash", "policy", true],
      ],
    );
    assert.equal(notices[1]!.reason, "rm is not allowed here");
    assert.deepEqual(notices.map((n) => n.requestId), asked.map((r) => r.requestId));
    // The reducer shows the same hook cards live and in the reopened transcript.
    const cards = (items: readonly ChatItem[]) => items.flatMap((it) => (it.kind === "hook" ? [{ ...it, id: "" }] : []));
    const live = cards(events.reduce(reduceChat, emptyChat).items);
    assert.deepEqual(live.map((c) => [c.kind === "hook" && c.action, c.toolCallId]), [["arguments_replaced", "call_1"], ["denied", "call_2"]]);
    assert.deepEqual(cards(itemsFromTranscript(entries)), live);
  });

  test("an approval with scope session stores a rule: the next run's matching call runs unasked, until the rule is deleted", async () => {
    const session = await served.client.createSession({
      workspaceRoot: newWorkspace(),
      tools: [{ name: "bash" }], // bash asks by default
      faux: {
        responses: [bash("call_1", "echo one"), text("first"), bash("call_2", "echo two"), text("second"), bash("call_3", "echo three"), text("third")],
      },
    });
    const requests: ApprovalRequested[] = [];
    const first = await drain(
      served.client.handle(session.id, served.client.prompt(session.id, "say one"), {
        approve: (req) => {
          requests.push(req);
          return { allow: true, scope: "session", rule: "suggested", decidedBy: "ts-test", reason: "echo is harmless" };
        },
      }),
    );
    assert.equal(requests.length, 1);
    const req = requests[0]!;
    assert.equal(req.toolCallId, "call_1");
    assert.deepEqual([...req.decisions].sort(), [ApprovalDecision.ALLOWED, ApprovalDecision.DENIED].sort());
    assert.ok(req.scopes.includes(ApprovalScope.SESSION), `scopes offered: ${req.scopes}`);
    assert.equal(req.suggestedRule?.toolName, "bash");
    const prefix = req.suggestedRule?.commandPrefix ?? "";
    assert.ok(prefix !== "" && "echo one".startsWith(prefix.trim()) && "echo two".startsWith(prefix.trim()), `suggested prefix ${JSON.stringify(prefix)}`);
    assert.equal(textOf(results(first).get("call_1")!.content).trim(), "one");

    const rules = await served.client.listApprovalRules(session.id);
    assert.equal(rules.length, 1);
    const rule = rules[0]!;
    assert.equal(rule.toolName, "bash");
    assert.equal(rule.commandPrefix, prefix);
    assert.equal(rule.decision, ApprovalDecision.ALLOWED);
    assert.equal(rule.createdBy, "ts-test");
    assert.notEqual(rule.id, "");

    // The second run: the rule decides, no approval_requested.
    const second = await drain(
      served.client.handle(session.id, served.client.prompt(session.id, "say two"), {
        approve: () => assert.fail("the rule should have decided call_2"),
      }),
    );
    assert.equal(ofCase(second, "approvalRequested").length, 0);
    assert.equal(textOf(results(second).get("call_2")!.content).trim(), "two");
    const notices = approvalNotices(await served.client.transcript(session.id));
    const byRule = notices.find((n) => n.toolCallId === "call_2");
    assert.equal(byRule?.decision, ApprovalDecision.ALLOWED);
    assert.equal(byRule?.rule?.id, rule.id, "the notice names the rule that decided");
    const created = notices.find((n) => n.toolCallId === "call_1");
    assert.equal(created?.scope, ApprovalScope.SESSION);
    assert.equal(created?.rule?.id, rule.id, "the first notice names the rule it created");

    // Deleted, the rule decides nothing: the third call asks again (denied here).
    const removal = await served.client.deleteApprovalRule(session.id, rule.id);
    assert.equal(removal?.payload.case, "approvalRuleRemoval");
    assert.deepEqual(await served.client.listApprovalRules(session.id), []);
    let asked = 0;
    const third = await drain(
      served.client.handle(session.id, served.client.prompt(session.id, "say three"), {
        approve: () => {
          asked++;
          return { allow: false, reason: "not again" };
        },
      }),
    );
    assert.equal(asked, 1);
    assert.equal(results(third).get("call_3")!.isError, true);
    assert.match(textOf(results(third).get("call_3")!.content), /not again/);
  });
});
