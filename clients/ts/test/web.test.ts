// The browser entry (connectWeb: the Connect protocol over fetch) against
// a live agentd's --http-listen, beside the Node entry (connect: gRPC over
// HTTP/2) on --listen: the same calls give the same events, the same
// reducer state and the same typed refusals. Node's fetch stands in for a
// browser's here; the console's test runs the same module in chromium.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Code } from "@connectrpc/connect";

import { ErrorReason } from "../../../gen/ts/agentd/v1/service_pb.js";
import { refusalOf } from "../src/client.js";
import { applyEvent, emptyConversation } from "../src/reducer.js";
import { connectWeb } from "../src/web.js";
import { serveAgentd } from "./agentd.js";

describe("connectWeb", () => {
  const served = serveAgentd(["--http-listen", "127.0.0.1:0"]);
  const web = () => {
    const m = /msg="http serving[^"]*" addr=(\S+)/.exec(served.agentd.log());
    assert.ok(m, "agentd logs its HTTP address");
    return connectWeb({ baseUrl: `http://${m[1]}` });
  };

  test("streams a prompt as the gRPC client does, and is refused alike", async () => {
    const config = { faux: { responses: [{ content: [{ block: { case: "text" as const, value: { text: "hello from faux" } } }] }], echo: true } };
    const viaWeb = web();
    const runOf = async (client: typeof served.client) => {
      const session = await client.createSession(config);
      let conv = emptyConversation;
      const kinds: string[] = [];
      for await (const ev of client.prompt(session.id, "hi")) {
        kinds.push(ev.event.case ?? "");
        conv = applyEvent(conv, ev);
      }
      return { kinds, items: conv.chat.items.map((it) => [it.kind, it.kind === "assistant" || it.kind === "user" ? it.text : ""]) };
    };
    const [grpc, connect] = [await runOf(served.client), await runOf(viaWeb)];
    assert.deepEqual(connect.kinds, grpc.kinds);
    assert.deepEqual(connect.items, grpc.items);
    assert.deepEqual(connect.items.at(-1), ["assistant", "hello from faux"]);

    const refusals = await Promise.all(
      [served.client, viaWeb].map(async (c) => {
        try {
          await c.rpc.getSession({ sessionId: "no-such-session" });
          return undefined;
        } catch (err) {
          return refusalOf(err);
        }
      }),
    );
    for (const r of refusals) {
      assert.equal(r?.code, Code.NotFound);
      assert.equal(r?.reason, ErrorReason.SESSION_NOT_FOUND);
      assert.equal(r?.metadata.session_id, "no-such-session");
    }
  });
});
