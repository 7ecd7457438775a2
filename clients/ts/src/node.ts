// connect is how a Node program reaches agentd: gRPC over HTTP/2 on its
// --listen port, through @connectrpc/connect-node.

import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { AgentdClient, authInterceptors, baseUrlOf, type ConnectOptions } from "./client.js";

/** Connects lazily over gRPC: the first call opens the HTTP/2 connection. */
export function connect(options: ConnectOptions): AgentdClient {
  const baseUrl = baseUrlOf(options.address);
  const sessions = new Http2SessionManager(baseUrl);
  const transport = createGrpcTransport({ baseUrl, interceptors: authInterceptors(options.token), sessionManager: sessions });
  return AgentdClient.over(transport, () => sessions.abort());
}
