// The web console in a real browser: Debian's chromium, driven by
// puppeteer-core, against a live agentd serving the console on its HTTP
// listener. The seed's two-prompt scenario end to end, with the approval
// clicked in the dialog, a reload while the run waits and one while an
// answer streams, edit-and-resend, the branch tree, navigate and fork.
// Screenshots are written to CONSOLE_SCREENSHOTS (default
// artifacts/console at the repository root) as the test's artefacts.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import puppeteer, { type Browser, type Page } from "puppeteer-core";

import { createHash } from "node:crypto";

import { ApprovalPolicy, ToolExecutor } from "../../../gen/ts/agentd/v1/session_pb.js";
import { CONFIG_SOURCE, PROMPTS } from "../examples/two_prompts.js";
import { connect } from "../src/node.js";
import { serveAgentd } from "./agentd.js";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../../../../..");
const shots = process.env.CONSOLE_SCREENSHOTS ?? join(repoRoot, "artifacts", "console");
const chromium = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";

const text = (t: string) => ({ content: [{ block: { case: "text" as const, value: { text: t } } }] });
const call = (id: string, name: string, args: Record<string, string>) => ({ content: [{ block: { case: "toolCall" as const, value: { id, name, arguments: args } } }] });

// In CI a missing browser fails the suite; elsewhere it skips it.
const skip = !existsSync(chromium) && process.env.CI !== "true" ? `no browser at ${chromium} (set CHROMIUM_BIN)` : false;

describe("web console", { skip }, () => {
  const served = serveAgentd(["--http-listen", "127.0.0.1:0"]);
  let browser: Browser;
  let page: Page;
  let workspace: string;
  let url = "";
  let shot = 0;

  const screenshot = async (name: string) => {
    await page.screenshot({ path: join(shots, `${String(++shot).padStart(2, "0")}-${name}.png`), fullPage: true });
  };

  before(async () => {
    mkdirSync(shots, { recursive: true });
    workspace = mkdtempSync(join(tmpdir(), "agentd-console-"));
    mkdirSync(join(workspace, "src"));
    writeFileSync(join(workspace, "src/config.ts"), CONFIG_SOURCE);
    const m = /msg="http serving[^"]*" addr=(\S+)[^\n]* console=(\S+)/.exec(served.agentd.log());
    assert.ok(m, `agentd logs its HTTP address and the console's URL:\n${served.agentd.log()}`);
    url = m[2]!;
    browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
    page.on("pageerror", (err) => assert.fail(`the page threw: ${String(err)}`));
  });

  after(async () => {
    await browser?.close();
    rmSync(workspace, { recursive: true, force: true });
  });

  const send = async (prompt: string) => {
    await page.click("#draft", { count: 3 });
    await page.type("#draft", prompt);
    await page.click("#send");
  };
  const count = (selector: string) => page.$$eval(selector, (els) => els.length);
  const lastAssistant = () =>
    page.$$eval("#items [data-kind=assistant]", (els) => ({ text: els.at(-1)?.textContent ?? "", streaming: els.at(-1)?.getAttribute("data-streaming") }));
  const clickNth = async (selector: string, n: number) => {
    const els = await page.$$(selector);
    assert.ok(els[n], `${selector} has an element ${n}`);
    await els[n].click();
  };

  test("the seed's two prompts, an approval clicked, reloads mid-run, edit and resend, the tree", async (t) => {
    t.after(async () => {
      // What the page showed when the test ended, passed or failed.
      await screenshot("end");
    });
    await page.goto(url);
    assert.equal(await page.title(), "agentd console");

    // The session list is live: a session created by another client appears.
    const session = await served.client.createSession(
      {
        systemPrompt: "你是桌面开发助手。",
        workspaceRoot: workspace,
        tools: [
          { name: "read_file", executor: ToolExecutor.SERVER },
          { name: "edit_file", executor: ToolExecutor.SERVER, approval: ApprovalPolicy.ASK },
        ],
        faux: {
          responses: [
            call("call_read", "read_file", { path: "src/config.ts" }),
            text("默认端口是 3000。"),
            call("call_edit", "edit_file", { path: "src/config.ts", old_text: "port: 3000", new_text: "port: 8080" }),
            text("好的，已经把 src/config.ts 里的默认端口从 3000 改成了 8080，其余配置保持不变。"),
          ],
          tokensPerSecond: 12,
        },
      },
      { title: "seed scenario" },
    );
    await page.waitForSelector(`#sessions [data-session-id="${session.id}"]`);
    await page.click(`#sessions [data-session-id="${session.id}"] button`);
    await page.waitForSelector("#conversation:not([hidden])");

    // Prompt 1: a server tool card, then the answer.
    await send(PROMPTS[0]);
    await page.waitForSelector('#items [data-kind=tool][data-tool-call-id=call_read][data-state=success]');
    await page.waitForFunction(() => document.querySelector("#conversation")?.getAttribute("data-running") === "false");
    assert.match((await lastAssistant()).text, /3000/);
    // What the model sees: the system prompt and the four messages the next call gets.
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=context-messages] li").length === 4);
    assert.match(await page.$eval("[data-testid=context-system]", (el) => el.textContent ?? ""), /桌面开发助手/);
    assert.deepEqual(
      await page.$$eval("[data-testid=context-messages] li", (els) => els.map((el) => el.getAttribute("data-role"))),
      ["user", "assistant", "toolResult", "assistant"],
    );
    await screenshot("first-answer");

    // Prompt 2: edit_file asks; the dialog opens.
    await send(PROMPTS[1]);
    await page.waitForSelector("#approval-dialog[open]");
    assert.equal(await page.$eval("#approval-tool", (el) => el.textContent), "edit_file");
    assert.match(await page.$eval("#approval-args", (el) => el.textContent ?? ""), /\+port: 8080/);
    await screenshot("approval-dialog");

    // Reload while the run waits: the run goes on (the prompt was
    // detached), and the page follows it again from its first event.
    await page.reload();
    await page.waitForSelector("#approval-dialog[open]");
    assert.equal(await count("#items [data-kind=user]"), 2, "both prompts are shown after the reload");
    assert.equal(await count("#items [data-kind=tool][data-state=success]"), 1);
    await page.click('#approval-scopes input[data-scope="call"]');
    await page.type("#approval-reason", "looks right");
    await page.click("#approval-allow");

    // Reload while the final answer streams: it resumes and finishes.
    await page.waitForFunction(() => document.querySelector("#items [data-tool-call-id=call_edit] ~ [data-kind=assistant][data-streaming=true]"));
    await screenshot("streaming");
    await page.reload();
    await page.waitForFunction(() => document.querySelector("#conversation")?.getAttribute("data-running") === "false" && document.querySelectorAll("#items [data-kind=assistant]").length === 4);
    const final = await lastAssistant();
    assert.match(final.text, /8080/);
    assert.equal(final.streaming, "false");
    assert.equal(await page.$eval("#items [data-kind=approval]", (el) => el.getAttribute("data-decision")), "allowed");
    assert.match(await page.$eval('#items [data-tool-call-id=call_edit] [data-testid=diff]', (el) => el.textContent ?? ""), /\+\s*port: 8080/);
    assert.equal(readFileSync(join(workspace, "src/config.ts"), "utf8"), CONFIG_SOURCE.replace("3000", "8080"));
    const notice = (await served.client.transcript(session.id)).find((e) => e.payload.case === "message" && e.payload.value.kind.case === "approvalNotice");
    assert.ok(notice?.payload.case === "message" && notice.payload.value.kind.case === "approvalNotice");
    assert.equal(notice.payload.value.kind.value.decidedBy, "console");
    assert.equal(notice.payload.value.kind.value.reason, "looks right");
    assert.equal(await page.$eval("#inbox-count", (el) => el.textContent), "0");
    await screenshot("second-answer");

    // Edit and resend the first prompt: a new branch from the root; the
    // tree shows two branches, and navigating back shows the first again.
    await clickNth("#items [data-kind=user] [data-action=edit]", 0);
    await page.waitForSelector("#editing:not([hidden])");
    await page.click("#draft", { count: 3 });
    await page.keyboard.press("Backspace");
    await page.type("#draft", "请读取 src/config.ts");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#conversation")?.getAttribute("data-running") === "false" && document.querySelectorAll("#items [data-kind=user]").length === 1);
    assert.match(await page.$eval("#items [data-kind=user]", (el) => el.textContent ?? ""), /请读取/);
    await page.click("#tree-panel summary");
    await page.waitForFunction(() => document.querySelectorAll("#tree li.branch").length === 2);
    await screenshot("tree");
    const oldLeaf = await page.$$eval("#tree li.node", (els) => els.find((el) => /改成了 8080/.test(el.textContent ?? ""))?.getAttribute("data-entry-id"));
    assert.ok(oldLeaf, "the first branch's last answer is in the tree");
    await page.click(`#tree li.node[data-entry-id="${oldLeaf}"] button`);
    await page.waitForFunction(() => document.querySelectorAll("#items [data-kind=user]").length === 2);
    assert.equal((await served.client.rpc.getSession({ sessionId: session.id })).session?.leafEntryId, oldLeaf);

    // Fork at the first answer: a new session opens with that path.
    await clickNth("#items [data-kind=assistant] .actions button", 1);
    await page.waitForFunction((id) => !location.hash.includes(id) && document.querySelector("#session-title")?.textContent?.endsWith("(fork)"), {}, session.id);
    await page.waitForFunction(() => document.querySelectorAll("#items [data-kind=user]").length === 1);
    await screenshot("fork");
  });

  test("the inbox answers another session's approval; the composer steers and aborts a streaming run", async () => {
    // An approval waiting in a session nobody has open shows in the inbox
    // and is answered there.
    const other = await served.client.createSession(
      { workspaceRoot: workspace, tools: [{ name: "write_file", executor: ToolExecutor.SERVER, approval: ApprovalPolicy.ASK }], faux: { responses: [call("w1", "write_file", { path: "notes.txt", content: "hi" }), text("written")] } },
      { title: "elsewhere" },
    );
    const run = (async () => {
      let outcome = "";
      for await (const ev of served.client.prompt(other.id, "write a note")) if (ev.event.case === "agentEnd") outcome = String(ev.event.value.outcome);
      return outcome;
    })();
    await page.waitForSelector(`#inbox li[data-kind=approval][data-session-id="${other.id}"]`);
    assert.equal(await page.$eval("#inbox-count", (el) => el.textContent), "1");
    await screenshot("inbox");
    await page.click(`#inbox li[data-session-id="${other.id}"] .quick button`);
    assert.equal(await run, "1", "the run completed (RUN_OUTCOME_COMPLETED)");
    await page.waitForFunction(() => document.querySelector("#inbox-count")?.textContent === "0");
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hi");

    // Steer while an answer streams: the message joins the run and the
    // (echoing) model answers it; then abort a slow answer.
    const busy = await served.client.createSession(
      { faux: { responses: [text("这是一段很长的回答，".repeat(80)), text("short, as asked"), text("慢慢地说。".repeat(300))], tokensPerSecond: 40 } },
      { title: "composer" },
    );
    await page.waitForSelector(`#sessions [data-session-id="${busy.id}"]`);
    await page.click(`#sessions [data-session-id="${busy.id}"] button`);
    await page.waitForFunction((id) => document.querySelector("#session-meta")?.textContent?.startsWith(id), {}, busy.id);
    await send("tell me a long story");
    await page.waitForSelector('#conversation[data-running="true"] #steer:not([hidden])');
    await page.type("#draft", "and keep it short");
    await page.click("#steer");
    await page.waitForFunction(() => document.querySelector("#conversation")?.getAttribute("data-running") === "false", { timeout: 60_000 });
    const users = await page.$$eval("#items [data-kind=user]", (els) => els.map((el) => el.querySelector(".text")?.textContent));
    assert.deepEqual(users, ["tell me a long story", "and keep it short"]);
    assert.match((await lastAssistant()).text, /short, as asked/);

    await send("once more, slowly");
    await page.waitForSelector('#conversation[data-running="true"] #abort:not([hidden])');
    await page.waitForFunction(() => /慢慢地说。慢慢地说。/.test(document.querySelectorAll("#items [data-kind=assistant]")[2]?.textContent ?? ""));
    await page.click("#abort");
    await page.waitForFunction(() => document.querySelector("#conversation")?.getAttribute("data-running") === "false");
    const aborted = await page.$$eval("#items [data-kind=assistant]", (els) => els.at(-1)?.querySelector(".error")?.textContent ?? "");
    assert.ok(aborted, "the aborted answer says so");
    await screenshot("aborted");
  });
});

describe("web console with tenants", { skip }, () => {
  // Two tenants, each with a token: the console asks for one and shows
  // that tenant's sessions only.
  const authDir = mkdtempSync(join(tmpdir(), "agentd-console-auth-"));
  const sha = (t: string) => createHash("sha256").update(t).digest("hex");
  writeFileSync(
    join(authDir, "auth.json"),
    JSON.stringify({ tokens: [{ sha256: sha("acme-token"), tenant: "acme", role: "user" }, { sha256: sha("globex-token"), tenant: "globex", role: "user" }] }),
  );
  const served = serveAgentd(["--http-listen", "127.0.0.1:0", "--auth-config", join(authDir, "auth.json")]);
  let browser: Browser;

  before(async () => {
    browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  });
  after(async () => {
    await browser?.close();
    rmSync(authDir, { recursive: true, force: true });
  });

  test("asks for a token, keeps it in the tab only, and shows only that tenant's sessions", async () => {
    const url = /msg="http serving[^"]*" console=(\S+)/.exec(served.agentd.log().replace(/ addr=\S+| cors_origins=\S+/g, ""))?.[1];
    assert.ok(url, served.agentd.log());
    const grpc = served.agentd.address;
    const acme = connect({ address: grpc, token: "acme-token" });
    const globex = connect({ address: grpc, token: "globex-token" });
    try {
      const mine = await acme.createSession({ faux: { echo: true } }, { title: "acme's" });
      const theirs = await globex.createSession({ faux: { echo: true } }, { title: "globex's" });
      const page = await (await browser.createBrowserContext()).newPage();
      page.on("pageerror", (err) => assert.fail(`the page threw: ${String(err)}`));
      await page.goto(url);
      await page.waitForSelector("#login-dialog[open]");
      assert.equal(await page.$$eval("#sessions li", (els) => els.length), 0, "nothing is listed without a token");
      await page.type("#login-token", "acme-token");
      await Promise.all([page.waitForNavigation(), page.click("#login-save")]);
      await page.waitForSelector(`#sessions [data-session-id="${mine.id}"]`);
      assert.equal(await page.$(`#sessions [data-session-id="${theirs.id}"]`), null, "another tenant's session is not listed");
      assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length]), [0, 1], "the token is kept in the tab's sessionStorage only");
      // Opening another tenant's session by its URL shows nothing of it.
      await page.goto(`${url}#session=${theirs.id}`);
      await page.reload();
      await page.waitForFunction(() => /not found/.test(document.querySelector("#status")?.textContent ?? ""));
      assert.equal(await page.$eval("#conversation", (el) => (el as HTMLElement).hidden), true);
    } finally {
      acme.close();
      globex.close();
    }
  });
});
