// startAgentd runs a real agentd for a test: on a free loopback port, with a
// database in a fresh temporary directory, stopped with SIGTERM afterwards.
// AGENTD_BIN names a prebuilt binary (make ts-test builds one); without it
// the binary is built from the repository with `go build`.

import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { once } from "node:events";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";

import { AgentdClient } from "../src/client.js";
import { connect } from "../src/node.js";

/** A running agentd. */
export interface Agentd {
  /** host:port it serves on. */
  readonly address: string;
  /** Everything it logged so far. */
  log(): string;
  /** SIGTERM, then waits for the exit; resolves to the exit code. */
  stop(): Promise<number | null>;
}

// build/clients/ts/test/agentd.js → the repository root.
const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../../../../..");

/** Builds agentd once per process unless AGENTD_BIN is set. */
function agentdBinary(work: string): string {
  const prebuilt = process.env.AGENTD_BIN;
  if (prebuilt) return prebuilt;
  const bin = join(work, "agentd");
  execFileSync("go", ["build", "-o", bin, "./cmd/agentd"], { cwd: repoRoot, stdio: "inherit", env: { ...process.env, GOTOOLCHAIN: "local" } });
  return bin;
}

export async function startAgentd(extraArgs: string[] = []): Promise<Agentd> {
  const work = mkdtempSync(join(tmpdir(), "agentd-ts-"));
  const bin = agentdBinary(work);
  const child: ChildProcess = spawn(bin, ["--listen", "127.0.0.1:0", "--db", join(work, "agentd.db"), ...extraArgs], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const exited = once(child, "exit");
  const address = await new Promise<string>((resolveAddr, reject) => {
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      const m = /msg="agentd serving" addr=(\S+)/.exec(log);
      if (m) resolveAddr(m[1]!);
    };
    child.stderr!.on("data", onData);
    child.once("exit", (code) => reject(new Error(`agentd exited with ${code} before serving:\n${log}`)));
    child.once("error", reject);
  });
  return {
    address,
    log: () => log,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      const [code] = (await exited) as [number | null];
      rmSync(work, { recursive: true, force: true });
      return code;
    },
  };
}

/** A suite's agentd and a client of it, set once the suite's before hook ran. */
export interface Served {
  agentd: Agentd;
  client: AgentdClient;
}

/**
 * Serves the enclosing describe block: starts an agentd (with extraArgs) and a
 * client before its tests, and afterwards closes the client and stops agentd,
 * failing the suite unless agentd exits 0 (its log in the message).
 */
export function serveAgentd(extraArgs: string[] = []): Served {
  const served = {} as Served;
  before(async () => {
    served.agentd = await startAgentd(extraArgs);
    served.client = connect({ address: served.agentd.address });
  });
  after(async () => {
    served.client?.close();
    assert.equal(await served.agentd?.stop(), 0, `agentd exit code; log:\n${served.agentd?.log()}`);
  });
  return served;
}
