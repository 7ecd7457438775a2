// Typed answers end to end: runs with an output schema against a real agentd,
// the faux model scripted to answer natively (its text is the JSON object) or
// through the reserved submit_output tool.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import type { JsonObject } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";

import { refusalOf } from "../src/client.js";
import { RunOutcome, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";
import type { AssistantMessage } from "../../../gen/ts/agentd/v1/messages_pb.js";
import { serveAgentd } from "./agentd.js";

const schema: JsonObject = {
  type: "object",
  properties: {
    label: { type: "string", enum: ["bug", "feature"] },
    priority: { type: "integer", minimum: 1, maximum: 3 },
  },
  required: ["label", "priority"],
};

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
const submit = (id: string, args: JsonObject) => ({
  content: [{ block: { case: "toolCall" as const, value: { id, name: "submit_output", arguments: args } } }],
});

async function collect(stream: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

function agentEnd(events: AgentEvent[]) {
  const last = events.at(-1)?.event;
  assert.equal(last?.case, "agentEnd");
  return last.value;
}

function finalAssistant(events: AgentEvent[]): AssistantMessage | undefined {
  let final: AssistantMessage | undefined;
  for (const e of events) {
    if (e.event.case === "messageEnd" && e.event.value.message?.kind.case === "assistant") final = e.event.value.message.kind.value;
  }
  return final;
}

describe("typed answers", () => {
  const served = serveAgentd();

  test("a native answer arrives as structuredOutput on agent_end, the final message and in the transcript", async () => {
    const session = await served.client.createSession({ faux: { responses: [text("It is a bug."), text('{"label": "bug", "priority": 2}')] } });
    const events = await collect(served.client.prompt(session.id, "Triage: the app crashes on start.", { outputSchema: schema }));
    const end = agentEnd(events);
    assert.equal(end.outcome, RunOutcome.COMPLETED, end.errorMessage);
    assert.deepEqual(end.structuredOutput, { label: "bug", priority: 2 });
    assert.deepEqual(finalAssistant(events)?.structuredOutput, { label: "bug", priority: 2 });
    const stored = (await served.client.transcript(session.id)).flatMap((e) =>
      e.payload.case === "message" && e.payload.value.kind.case === "assistant" ? [e.payload.value.kind.value] : [],
    );
    assert.equal(stored.length, 2, "the plain-text answer and the corrected one");
    assert.equal(stored[0]!.structuredOutput, undefined);
    assert.deepEqual(stored[1]!.structuredOutput, { label: "bug", priority: 2 });
  });

  test("through submit_output, with the session's default schema", async () => {
    const session = await served.client.createSession({
      outputSchema: schema,
      faux: { structuredOutputTool: true, responses: [submit("c1", { label: "feature", priority: 3 })] },
    });
    const events = await collect(served.client.prompt(session.id, "Triage: add dark mode."));
    const end = agentEnd(events);
    assert.equal(end.outcome, RunOutcome.COMPLETED, end.errorMessage);
    assert.deepEqual(end.structuredOutput, { label: "feature", priority: 3 });
    assert.deepEqual(finalAssistant(events)?.structuredOutput, { label: "feature", priority: 3 });
  });

  test("an answer that never validates ends OUTPUT_INVALID with a fatal output_schema error", async () => {
    const bad = text('{"label": "chore", "priority": 1}');
    const session = await served.client.createSession({ faux: { responses: [bad, bad] } });
    const events = await collect(served.client.prompt(session.id, "Triage: tidy up.", { outputSchema: schema, maxOutputRetries: 0 }));
    const end = agentEnd(events);
    assert.equal(end.outcome, RunOutcome.OUTPUT_INVALID);
    assert.match(end.errorMessage, /label: must be equal to one of the allowed values/);
    assert.equal(end.structuredOutput, undefined);
    const errors = events.flatMap((e) => (e.event.case === "error" ? [e.event.value] : []));
    assert.deepEqual(
      errors.map((e) => [e.stage, e.fatal]),
      [["output_schema", true]],
    );
  });

  test("a schema whose root is not an object is refused naming the field", async () => {
    const session = await served.client.createSession({ faux: { echo: true } });
    const refused = await collect(served.client.prompt(session.id, "hi", { outputSchema: { type: "array" } })).then(
      () => undefined,
      (err: unknown) => refusalOf(err),
    );
    assert.equal(refused?.code, Code.InvalidArgument);
    assert.equal(refused?.metadata["field"], "output_schema");
  });
});
