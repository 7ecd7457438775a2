// The requests the policy helpers send, checked against a recording rpc.
// No agentd here: the fake records each call, so these tests pin down how a
// HookAnswer, an approval's options and an in-doubt decision become request
// fields, and which hook_requested events handle() answers.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { create, type MessageInitShape } from "@bufbuild/protobuf";

import { AgentdClient } from "../src/client.js";
import { connect } from "../src/node.js";
import { onPostToolUse, onPreCompact, onPreToolUse, onStop, onUserPrompt, verdict } from "../src/hooks.js";
import { ApprovalDecision, ApprovalScope, HookEvent } from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
import { AgentEventSchema, ApprovalRequestedSchema, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";
import { HookVerdict, InDoubtAction } from "../../../gen/ts/agentd/v1/service_pb.js";

type Call = [method: string, request: Record<string, unknown>];

// recording returns a client whose rpc records every call and answers it
// with an empty response.
function recording(): { client: AgentdClient; calls: Call[] } {
  const calls: Call[] = [];
  const client = connect({ address: "127.0.0.1:1" }); // never dialled
  const rpc = new Proxy({}, { get: (_t, method: string) => async (request: Record<string, unknown>) => (calls.push([method, request]), {}) });
  Object.defineProperty(client, "rpc", { value: rpc });
  return { client, calls };
}

async function* stream(...events: MessageInitShape<typeof AgentEventSchema>[]): AsyncGenerator<AgentEvent> {
  for (const e of events) yield create(AgentEventSchema, e);
}

const hookEvent = (requestId: string, event: HookEvent, fields: Record<string, unknown> = {}): MessageInitShape<typeof AgentEventSchema> => ({
  event: { case: "hookRequested", value: { requestId, event, hook: "hooks[0]", ...fields } },
});

describe("policy requests", () => {
  test("each HookAnswer becomes SubmitHookResult's fields", async () => {
    const { client, calls } = recording();
    const cases: [string, ReturnType<typeof verdict.allow>, Record<string, unknown>][] = [
      ["allow", verdict.allow({ decidedBy: "me" }), { verdict: HookVerdict.ALLOW, decidedBy: "me", replaceDetails: false, content: [] }],
      ["deny", verdict.deny("no", { includeInModelContext: true }), { verdict: HookVerdict.DENY, reason: "no", includeInModelContext: true }],
      ["redact", verdict.redact("secret"), { verdict: HookVerdict.REDACT, reason: "secret" }],
      ["modify instructions", verdict.modify({ instructions: "keep the numbers" }), { verdict: HookVerdict.MODIFY, instructions: "keep the numbers" }],
      ["modify arguments", verdict.modify({ arguments: { command: "ls" } }), { verdict: HookVerdict.MODIFY, arguments: { command: "ls" }, replaceDetails: false }],
      ["modify details removed", verdict.modify({ content: "short", details: null }), { verdict: HookVerdict.MODIFY, replaceDetails: true, details: undefined }],
    ];
    for (const [name, answer, want] of cases) {
      calls.length = 0;
      await client.submitHookResult("s", "r", answer);
      assert.equal(calls.length, 1, name);
      const [method, req] = calls[0]!;
      assert.equal(method, "submitHookResult", name);
      assert.equal(req["sessionId"], "s");
      assert.equal(req["requestId"], "r");
      for (const [k, v] of Object.entries(want)) assert.deepEqual(req[k], v, `${name}: ${k}`);
    }
    calls.length = 0;
    await client.submitHookResult("s", "r", verdict.modify({ content: "short", details: { n: 1 } }));
    const req = calls[0]![1];
    assert.equal(req["replaceDetails"], true);
    assert.equal((req["content"] as { block: { value: { text: string } } }[])[0]!.block.value.text, "short");
    assert.notEqual(req["details"], undefined);
  });

  test("handle() answers a hook_requested with the first handler of its event (and name); the others wait", async () => {
    const { client, calls } = recording();
    const seen: unknown[] = [];
    const call = { id: "c1", name: "bash", arguments: { command: "rm -rf /" } };
    const events = stream(
      hookEvent("r1", HookEvent.PRE_TOOL_USE, { hook: "other", toolCall: call }), // no handler of that name
      hookEvent("r2", HookEvent.PRE_TOOL_USE, { hook: "shell", toolCall: call }),
      hookEvent("r3", HookEvent.POST_TOOL_USE, { toolResult: { toolName: "bash" } }),
      hookEvent("r4", HookEvent.STOP), // no STOP handler: left to its timeout
      hookEvent("r5", HookEvent.USER_PROMPT, { source: "steer", message: { kind: { case: "user", value: { content: [{ block: { case: "text", value: { text: "hi" } } }] } } } }),
      hookEvent("r6", HookEvent.PRE_COMPACT, { instructions: "be brief" }),
    );
    const out: AgentEvent[] = [];
    for await (const e of client.handle("s", events, {
      hooks: [
        onPreToolUse((args) => (seen.push(["pre", args]), verdict.deny("no rm")), { hook: "shell" }),
        onPostToolUse(async (result) => (seen.push(["post", result?.toolName]), verdict.redact())),
        onUserPrompt((text, req) => (seen.push(["prompt", text, req.source]), verdict.allow())),
        onPreCompact((instructions) => (seen.push(["compact", instructions]), verdict.allow())),
      ],
    }))
      out.push(e);
    assert.equal(out.length, 6, "every event is yielded, answered or not");
    assert.deepEqual(seen, [["pre", { command: "rm -rf /" }], ["post", "bash"], ["prompt", "hi", "steer"], ["compact", "be brief"]]);
    assert.deepEqual(
      calls.map(([m, r]) => [m, r["requestId"], r["verdict"]]),
      [
        ["submitHookResult", "r2", HookVerdict.DENY],
        ["submitHookResult", "r3", HookVerdict.REDACT],
        ["submitHookResult", "r5", HookVerdict.ALLOW],
        ["submitHookResult", "r6", HookVerdict.ALLOW],
      ],
    );

    calls.length = 0;
    const stop = stream(hookEvent("r7", HookEvent.STOP, { message: { kind: { case: "assistant", value: { content: [{ block: { case: "text", value: { text: "done" } } }] } } } }));
    for await (const _ of client.handle("s", stop, { hooks: [onStop((answer) => verdict.modify({ content: `${answer}? run the tests first` }))] }));
    assert.equal((calls[0]![1]["content"] as { block: { value: { text: string } } }[])[0]!.block.value.text, "done? run the tests first");
  });

  test("approvals carry scope, rule, edited arguments and batches", async () => {
    const { client, calls } = recording();
    const req = create(ApprovalRequestedSchema, { toolCallId: "c1", toolName: "bash", suggestedRule: { toolName: "bash", commandPrefix: "git" } });
    await client.approve("s", req, { scope: "session", rule: "suggested", decidedBy: "me" });
    await client.approve("s", req, { scope: "run", rule: { commandPrefix: "git status" } });
    await client.deny("s", ["c1", "c2", "c3"], { reason: "not now" });
    await client.approve("s", "c1", { arguments: { command: "git status" } });
    await client.resolveApproval("s", "c9", true, { scope: "call", rule: { toolName: "write_file", pathGlob: "src/*.go" } });
    const got = calls.map(([, r]) => r);
    const rule = (i: number) => got[i]!["rule"] as { toolName: string; commandPrefix: string; pathGlob: string } | undefined;
    assert.deepEqual([got[0]!["scope"], rule(0)?.toolName, rule(0)?.commandPrefix, got[0]!["decidedBy"]], [ApprovalScope.SESSION, "bash", "git", "me"]);
    assert.deepEqual([got[1]!["scope"], rule(1)?.toolName, rule(1)?.commandPrefix], [ApprovalScope.RUN, "bash", "git status"], "the rule's tool defaults to the call's");
    assert.deepEqual([got[2]!["decision"], got[2]!["toolCallId"], got[2]!["toolCallIds"], got[2]!["reason"]], [ApprovalDecision.DENIED, "c1", ["c2", "c3"], "not now"]);
    assert.deepEqual([got[3]!["arguments"], rule(3), got[3]!["scope"]], [{ command: "git status" }, undefined, ApprovalScope.UNSPECIFIED]);
    assert.deepEqual([rule(4)?.toolName, rule(4)?.pathGlob, got[4]!["toolCallIds"]], ["write_file", "src/*.go", []]);
    await assert.rejects(client.approve("s", "c1", { scope: "session", rule: "suggested" }), /suggested/, "no request to take the suggestion from");

    // handle(): the approver's answer carries the same options.
    calls.length = 0;
    const events = stream({ event: { case: "approvalRequested", value: req } }, { event: { case: "approvalRequested", value: { toolCallId: "c2" } } });
    const answers = [{ allow: true, scope: "session" as const, rule: "suggested" as const }, { allow: false, reason: "no", decidedBy: "me" }];
    for await (const _ of client.handle("s", events, { approve: () => answers.shift()! }));
    assert.deepEqual([calls[0]![1]["scope"], (calls[0]![1]["rule"] as { commandPrefix: string }).commandPrefix], [ApprovalScope.SESSION, "git"]);
    assert.deepEqual([calls[1]![1]["decision"], calls[1]![1]["reason"], calls[1]![1]["decidedBy"]], [ApprovalDecision.DENIED, "no", "me"]);
  });

  test("in-doubt decisions", async () => {
    const { client, calls } = recording();
    await client.resolveInDoubt("s", "c1", { action: "retry" });
    await client.resolveInDoubt("s", "c1", { action: "skip", message: "not retried" });
    await client.resolveInDoubt("s", "c1", { action: "supply", result: { content: "done", details: { exit: 0 } } });
    assert.deepEqual(calls.map(([m, r]) => [m, r["action"]]), [
      ["resolveInDoubt", InDoubtAction.RETRY],
      ["resolveInDoubt", InDoubtAction.SKIP],
      ["resolveInDoubt", InDoubtAction.SUPPLY],
    ]);
    assert.equal(calls[1]![1]["message"], "not retried");
    assert.equal((calls[2]![1]["content"] as { block: { value: { text: string } } }[])[0]!.block.value.text, "done");
    assert.equal(calls[2]![1]["isError"], false);
    assert.notEqual(calls[2]![1]["details"], undefined);
  });
});
