// connectWeb is how a browser page (or an Electron renderer, a Tauri
// webview, a service worker) reaches agentd: the Connect protocol over
// fetch, on agentd's --http-listen port. Import "@agentd/client/web" (this
// module): it pulls in no Node modules, and the reducer is the same one.

import { createConnectTransport } from "@connectrpc/connect-web";

import { AgentdClient, authInterceptors } from "./client.js";

export * from "./api.js";

/** How a browser reaches agentd. */
export interface WebConnectOptions {
  /**
   * agentd's --http-listen URL, such as "http://127.0.0.1:7778"; defaults to
   * the page's own origin (the console agentd serves). Another origin must
   * be listed in agentd's --cors-origins.
   */
  baseUrl?: string;
  /** Sent as `authorization: Bearer <token>` when agentd runs with --auth-token. */
  token?: string;
  /** Binary protobuf instead of JSON on the wire: smaller, harder to read in devtools. */
  binary?: boolean;
}

/**
 * Connects over the Connect protocol (server streams included, through
 * fetch): every RPC of the Node client works the same, with the same
 * refusals.
 */
export function connectWeb(options: WebConnectOptions = {}): AgentdClient {
  const baseUrl = options.baseUrl ?? globalThis.location.origin;
  const transport = createConnectTransport({ baseUrl, interceptors: authInterceptors(options.token), useBinaryFormat: options.binary ?? false });
  return AgentdClient.over(transport);
}
