// Run records end to end: prompts and a continue with metadata against a real
// agentd, the faux model scripted to answer the first run and fail the next,
// then getRun and listRuns (newest first, filtered and paged).

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { Code } from "@connectrpc/connect";

import { refusalOf } from "../src/client.js";
import { StopReason } from "../../../gen/ts/agentd/v1/content_pb.js";
import { RunOutcome, type AgentEvent } from "../../../gen/ts/agentd/v1/events_pb.js";
import { ErrorReason } from "../../../gen/ts/agentd/v1/service_pb.js";
import { serveAgentd } from "./agentd.js";

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
// A failed answer; its message matches none of the retryable patterns, so the
// run ends ERROR at once.
const failed = (message: string) => ({ stopReason: StopReason.ERROR, errorMessage: message });

async function collect(stream: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

// echoed returns the metadata agent_start and agent_end carried, checking
// that they open and close the stream.
function echoed(events: AgentEvent[]): { start: Record<string, string>; end: Record<string, string>; runId: string } {
  const first = events[0]?.event;
  const last = events.at(-1)?.event;
  assert.equal(first?.case, "agentStart");
  assert.equal(last?.case, "agentEnd");
  return { start: first.value.metadata, end: last.value.metadata, runId: events[0]!.runId };
}

describe("run records", () => {
  const served = serveAgentd();

  test("metadata is echoed and stored; listRuns lists newest first, filters and pages; getRun returns a run", async () => {
    const session = await served.client.createSession({ faux: { responses: [text("Nightly report ready."), failed("scripted failure: bad request")] } });

    const nightly = { job: "nightly", attempt: "1" };
    const first = echoed(await collect(served.client.prompt(session.id, "Write the nightly report.", { metadata: nightly })));
    assert.deepEqual(first.start, nightly);
    assert.deepEqual(first.end, nightly);

    const adhoc = { job: "adhoc" };
    const secondEvents = await collect(served.client.prompt(session.id, "And an ad-hoc one.", { metadata: adhoc }));
    const second = echoed(secondEvents);
    assert.deepEqual(second.start, adhoc);
    assert.deepEqual(second.end, adhoc);
    const end = secondEvents.at(-1)!.event;
    assert.equal(end.case === "agentEnd" && end.value.outcome, RunOutcome.ERROR);

    // Continue retries the failed answer (the script fails it again) with metadata of its own.
    const retry = { job: "adhoc", attempt: "2" };
    const third = echoed(await collect(served.client.continue(session.id, { metadata: retry })));
    assert.deepEqual(third.start, retry);
    assert.deepEqual(third.end, retry);

    const all = await served.client.listRuns(session.id);
    assert.deepEqual(
      all.runs.map((r) => r.id),
      [third.runId, second.runId, first.runId],
      "newest first",
    );
    assert.equal(all.nextPageToken, "");

    const byJob = await served.client.listRuns(session.id, { metadataFilter: { job: "nightly" } });
    assert.deepEqual(byJob.runs.map((r) => r.id), [first.runId]);
    const byKey = await served.client.listRuns(session.id, { metadataFilter: { attempt: "" } });
    assert.deepEqual(byKey.runs.map((r) => r.id), [third.runId, first.runId], "an empty value matches any value of the key");
    const byOutcome = await served.client.listRuns(session.id, { outcomes: [RunOutcome.ERROR] });
    assert.deepEqual(byOutcome.runs.map((r) => r.id), [third.runId, second.runId]);

    // Dates have milliseconds: the first run started at or after its own start truncated to them.
    const started = all.runs[2]!.startTime!;
    const firstStart = new Date(Number(started.seconds) * 1000 + Math.floor(started.nanos / 1_000_000));
    assert.equal((await served.client.listRuns(session.id, { startTimeAfter: firstStart })).runs.length, 3);
    assert.equal((await served.client.listRuns(session.id, { startTimeBefore: firstStart })).runs.length, 0);
    assert.equal((await served.client.listRuns(session.id, { startTimeAfter: new Date(Date.now() + 3_600_000) })).runs.length, 0);

    const page1 = await served.client.listRuns(session.id, { pageSize: 2 });
    assert.deepEqual(page1.runs.map((r) => r.id), [third.runId, second.runId]);
    assert.notEqual(page1.nextPageToken, "");
    const page2 = await served.client.listRuns(session.id, { pageSize: 2, pageToken: page1.nextPageToken });
    assert.deepEqual(page2.runs.map((r) => r.id), [first.runId]);
    assert.equal(page2.nextPageToken, "");

    const done = await served.client.getRun(session.id, first.runId);
    assert.equal(done.id, first.runId);
    assert.equal(done.sessionId, session.id);
    assert.equal(done.outcome, RunOutcome.COMPLETED);
    assert.equal(done.errorMessage, "");
    assert.equal(done.request?.method, "prompt");
    assert.deepEqual(done.request?.metadata, nightly);
    assert.ok(done.startTime && done.endTime && done.usage, "start, end and usage are set once it ended");

    const broke = await served.client.getRun(session.id, second.runId);
    assert.equal(broke.outcome, RunOutcome.ERROR);
    assert.match(broke.errorMessage, /scripted failure: bad request/);
    assert.deepEqual(broke.request?.metadata, adhoc);

    const continued = await served.client.getRun(session.id, third.runId);
    assert.equal(continued.request?.method, "continue");
    assert.deepEqual(continued.request?.metadata, retry);
  });

  test("getRun of an unknown run fails with NOT_FOUND (RUN_NOT_FOUND)", async () => {
    const session = await served.client.createSession({ faux: { echo: true } });
    const refused = await served.client.getRun(session.id, "run-nope").then(
      () => undefined,
      (err: unknown) => refusalOf(err),
    );
    assert.equal(refused?.code, Code.NotFound);
    assert.equal(refused?.reason, ErrorReason.RUN_NOT_FOUND);
  });
});
