// The seed's two-prompt scenario against a running agentd with the faux
// model: "read src/config.ts, what is the default port?" is answered with
// read_file, a client-executed tool implemented here in TypeScript; "change it
// to 8080" makes the model call the built-in edit_file, which asks for
// approval, granted here. The ChatItems are printed as they settle.
//
//   make run &                      # agentd on 127.0.0.1:7777
//   make ts-example                 # or: cd clients/ts && npm run example -- --address 127.0.0.1:7777

import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, relative, sep } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

import { AgentdClient, type ToolResultInput } from "../src/client.js";
import { connect } from "../src/node.js";
import { applyEvent, emptyConversation, type ChatItem, type Conversation } from "../src/reducer.js";
import { ToolExecutor, ApprovalPolicy } from "../../../gen/ts/agentd/v1/session_pb.js";
import type { JsonObject } from "@bufbuild/protobuf";

export const PROMPTS = ["读取 src/config.ts，告诉我默认端口。", "把它改成 8080"] as const;
export const CONFIG_SOURCE = "export const config = {\n  port: 3000,\n};\n";

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
const call = (id: string, name: string, args: JsonObject) => ({ content: [{ block: { case: "toolCall" as const, value: { id, name, arguments: args } } }] });

/** readFile is the client-executed tool: a file of the workspace, confined to it. */
export function readFile(workspace: string, args: JsonObject): ToolResultInput {
  const path = resolve(workspace, String(args.path));
  if (relative(workspace, path).startsWith(".." + sep)) return { content: `${args.path} is outside the workspace`, isError: true };
  const body = readFileSync(path, "utf8");
  return { content: body, details: { path: String(args.path), bytes: Buffer.byteLength(body) } };
}

/** Runs both prompts on a new session and returns what the screen shows. */
export async function twoPrompts(client: AgentdClient, workspace: string, print: (line: string) => void = () => {}) {
  const session = await client.createSession({
    systemPrompt: "你是桌面开发助手。",
    workspaceRoot: workspace,
    tools: [
      {
        name: "read_file",
        description: "Read a file of the user's project (runs in the client).",
        executor: ToolExecutor.CLIENT,
        parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      },
      { name: "edit_file", executor: ToolExecutor.SERVER, approval: ApprovalPolicy.ASK },
    ],
    // The faux model's answers, in order: one per model call.
    faux: {
      responses: [
        call("call_read", "read_file", { path: "src/config.ts" }),
        text("默认端口是 3000。"),
        call("call_edit", "edit_file", { path: "src/config.ts", old_text: "port: 3000", new_text: "port: 8080" }),
        text("已把默认端口改成 8080。"),
      ],
    },
  });
  let conv: Conversation = emptyConversation;
  const events = [];
  const printed = new Set<string>(); // an item changes after it settles (its entry id arrives): print it once
  for (const prompt of PROMPTS) {
    const stream = client.handle(session.id, client.prompt(session.id, prompt), {
      tools: { read_file: (args) => readFile(workspace, args) },
      approve: (req) => {
        print(`  ? approve ${req.toolName} ${JSON.stringify(req.arguments)} → yes`);
        return { allow: true, reason: "looks right", decidedBy: "example" };
      },
    });
    for await (const event of stream) {
      events.push(event);
      conv = applyEvent(conv, event);
      for (const item of conv.chat.items) {
        if (settled(item) && !printed.has(item.id)) {
          printed.add(item.id);
          print(`  ${describe(item)}`);
        }
      }
    }
  }
  return { sessionId: session.id, conv, events };
}

function settled(item: ChatItem): boolean {
  return (
    !(item.kind === "assistant" && item.isStreaming) &&
    !(item.kind === "tool" && item.state === "running") &&
    !(item.kind === "approval" && item.decision === "pending") &&
    !(item.kind === "compaction" && item.state === "running")
  );
}

/** One line per item, as a terminal UI would draw it. */
export function describe(item: ChatItem): string {
  switch (item.kind) {
    case "user":
      return `you: ${item.text}`;
    case "assistant":
      return `assistant: ${item.text}${item.error ? ` (${item.error})` : ""}`;
    case "tool":
      return `tool ${item.label} [${item.state}]`;
    case "approval":
      return `approval ${item.label} [${item.decision}${item.decidedBy ? ` by ${item.decidedBy}` : ""}]`;
    case "compaction":
      return `earlier conversation summarized (${item.reason}) [${item.state}${item.error ? `: ${item.error}` : ""}]`;
    case "hook":
      return `hook ${item.hook} ${item.action}${item.toolName ? ` ${item.toolName}` : ""}${item.reason ? `: ${item.reason}` : ""}`;
  }
}

async function main() {
  const { values } = parseArgs({ options: { address: { type: "string", default: "127.0.0.1:7777" }, token: { type: "string" } } });
  const workspace = mkdtempSync(join(tmpdir(), "agentd-example-"));
  mkdirSync(join(workspace, "src"));
  writeFileSync(join(workspace, "src/config.ts"), CONFIG_SOURCE);
  const client = connect({ address: values.address!, ...(values.token ? { token: values.token } : {}) });
  try {
    const { sessionId, conv } = await twoPrompts(client, workspace, console.log);
    console.log(`session ${sessionId}: ${conv.chat.items.length} items, ${conv.transcript.length} messages in the transcript`);
    console.log(`${workspace}/src/config.ts now reads: ${JSON.stringify(readFileSync(join(workspace, "src/config.ts"), "utf8"))}`);
  } finally {
    client.close();
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
