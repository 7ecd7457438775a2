// The example's two-prompt scenario end to end: a TypeScript client tool, an
// approval, the reducer's final ChatItems and the stored transcript.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";


import { AgentdClient } from "../src/client.js";
import { connect } from "../src/node.js";
import { itemsFromTranscript } from "../src/reducer.js";
import { CONFIG_SOURCE, PROMPTS, twoPrompts } from "../examples/two_prompts.js";
import { startAgentd, type Agentd } from "./agentd.js";

let agentd: Agentd;
let client: AgentdClient;

before(async () => {
  agentd = await startAgentd();
  client = connect({ address: agentd.address });
});

after(async () => {
  client?.close();
  assert.equal(await agentd?.stop(), 0);
});

test("the two-prompt example: client read_file, approved edit_file, final ChatItems", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "agentd-ts-ws-"));
  mkdirSync(join(workspace, "src"));
  writeFileSync(join(workspace, "src/config.ts"), CONFIG_SOURCE);
  const printed: string[] = [];
  const { sessionId, conv, events } = await twoPrompts(client, workspace, (line) => printed.push(line));
  assert.equal(printed.filter((l) => !l.startsWith("  ? ")).length, conv.chat.items.length, `each item printed once: ${printed.join("\n")}`);
  const items = conv.chat.items.map((it) => {
    switch (it.kind) {
      case "user":
      case "assistant":
        return [it.kind, it.text];
      case "tool":
        return [it.kind, it.toolCallId, it.state];
      case "approval":
        return [it.kind, it.toolCallId, it.decision, it.decidedBy];
      case "compaction":
        return [it.kind, it.state];
      case "hook":
        return [it.kind, it.action];
    }
  });
  // The approval item and the edit's tool card may come in either order.
  const sorted = (xs: unknown[][]) => [...xs].sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
  assert.deepEqual(items.slice(0, 4), [
    ["user", PROMPTS[0]],
    ["assistant", ""],
    ["tool", "call_read", "success"],
    ["assistant", "默认端口是 3000。"],
  ]);
  assert.deepEqual(items.slice(4, 6), [["user", PROMPTS[1]], ["assistant", ""]]);
  assert.deepEqual(sorted(items.slice(6, 8)), sorted([["approval", "call_edit", "allowed", "example"], ["tool", "call_edit", "success"]]));
  assert.deepEqual(items.slice(8), [["assistant", "已把默认端口改成 8080。"]]);

  const read = conv.chat.items.find((it) => it.kind === "tool" && it.toolCallId === "call_read");
  assert.ok(read?.kind === "tool" && read.output === CONFIG_SOURCE, "the model saw what the TS tool read");
  assert.match(readFileSync(join(workspace, "src/config.ts"), "utf8"), /port: 8080/, "the approved edit ran");
  assert.ok(events.some((e) => e.event.case === "toolCallRequested"));
  assert.ok(events.some((e) => e.event.case === "approvalRequested"));

  // The stored transcript decodes and rebuilds the same cards (the approval
  // notice stands where it was stored).
  const entries = await client.transcript(sessionId);
  const rebuilt = itemsFromTranscript(entries).map((it) => [it.kind, "text" in it ? it.text : "state" in it ? it.state : "decision" in it ? it.decision : it.action]);
  const live = conv.chat.items.map((it) => [it.kind, "text" in it ? it.text : "state" in it ? it.state : "decision" in it ? it.decision : it.action]);
  assert.deepEqual(sorted(rebuilt), sorted(live));
});
