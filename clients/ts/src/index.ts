// @agentd/client for Node: everything in api.ts, and connect (gRPC over
// HTTP/2). Browsers import "@agentd/client/web" instead.
export * from "./api.js";
export * from "./node.js";
