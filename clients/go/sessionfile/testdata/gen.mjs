// Writes the pi session fixture of the sessionfile tests with the real
// SessionManager of @mariozechner/pi-coding-agent 0.73 (not a dependency of
// agentd: install it in a scratch folder, run `node gen.mjs OUT_DIR` there).
// OUT_DIR/session.jsonl is the session file pi writes; context.json is what
// pi's model call gets for its leaf: convertToLlm(buildSessionContext(...)).
import { SessionManager, buildSessionContext, convertToLlm } from "@mariozechner/pi-coding-agent";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

const out = process.argv[2] ?? ".";
const dir = mkdtempSync(join(tmpdir(), "pi-session-"));
const sm = SessionManager.create("/work/project", dir);
const t = 1764806400000;
const usage = (input, output) => ({ input, output, cacheRead: 0, cacheWrite: 0, totalTokens: input + output, cost: { input: 0.001, output: 0.002, cacheRead: 0, cacheWrite: 0, total: 0.003 } });
const u1 = sm.appendMessage({ role: "user", content: "读取 src/config.ts，告诉我默认端口。", timestamp: t });
const a1 = sm.appendMessage({
  role: "assistant",
  content: [
    { type: "thinking", thinking: "I need to read the file.", thinkingSignature: "sig-1" },
    { type: "text", text: "Reading it.", textSignature: "tsig" },
    { type: "toolCall", id: "call_read", name: "read", arguments: { path: "src/config.ts", limit: 20 } },
  ],
  api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", usage: usage(100, 20), stopReason: "toolUse", timestamp: t + 1000,
});
const r1 = sm.appendMessage({ role: "toolResult", toolCallId: "call_read", toolName: "read", content: [{ type: "text", text: "export const config = { port: 3000 };" }], details: { lines: 1 }, isError: false, timestamp: t + 2000 });
// A side branch, left with a summary.
sm.appendMessage({ role: "assistant", content: [{ type: "text", text: "It is 3000, I think." }], api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", usage: usage(120, 8), stopReason: "stop", timestamp: t + 3000 });
const left = sm.branchWithSummary(r1, "An earlier answer guessed without checking.");
sm.appendModelChange("openai", "gpt-5");
sm.appendThinkingLevelChange("high");
sm.appendMessage({ role: "assistant", content: [{ type: "text", text: "默认端口是 3000。" }], api: "openai-responses", provider: "openai", model: "gpt-5", usage: usage(200, 10), stopReason: "stop", timestamp: t + 4000 });
sm.appendMessage({ role: "bashExecution", command: "grep -n port src/config.ts", output: "1:export const config = { port: 3000 };\n", exitCode: 0, cancelled: false, truncated: false, timestamp: t + 5000 });
sm.appendCustomMessageEntry("job_done", "The nightly build finished.", true, { ok: true });
sm.appendLabelChange(u1, "start");
sm.appendMessage({ role: "user", content: [{ type: "text", text: "把它改成 8080。" }], timestamp: t + 6000 });
// Kept from the branch summary on: a cut point as pi's compaction chooses
// them (never a tool result).
sm.appendCompaction("## Goal\nChange the default port.", left, 500, { readFiles: ["src/config.ts"], modifiedFiles: [] });
sm.appendMessage({ role: "assistant", content: [{ type: "toolCall", id: "call_edit", name: "edit", arguments: { path: "src/config.ts", oldText: "3000", newText: "8080" } }], api: "openai-responses", provider: "openai", model: "gpt-5", usage: usage(300, 30), stopReason: "toolUse", timestamp: t + 7000 });
sm.appendMessage({ role: "toolResult", toolCallId: "call_edit", toolName: "edit", content: [{ type: "text", text: "Edited src/config.ts" }], isError: false, timestamp: t + 8000 });

const file = join(dir, readdirSync(dir)[0]);
writeFileSync(join(out, "session.jsonl"), readFileSync(file, "utf8"));
const context = buildSessionContext(sm.getEntries());
writeFileSync(join(out, "context.json"), JSON.stringify({ messages: convertToLlm(context.messages), thinkingLevel: context.thinkingLevel, model: context.model }, null, 1) + "\n");
