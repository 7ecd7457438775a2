// The transport-neutral part of @agentd/client, shared by the Node entry
// (index.ts) and the browser entry (web.ts): the generated agentd.v1 types,
// the thin client, the hook helpers and the ChatItem reducer.
export * from "./client.js";
export * from "./hooks.js";
export * from "./reducer.js";
export * from "../../../gen/ts/agentd/v1/agent_messages_pb.js";
export * from "../../../gen/ts/agentd/v1/content_pb.js";
export * from "../../../gen/ts/agentd/v1/events_pb.js";
export * from "../../../gen/ts/agentd/v1/messages_pb.js";
export * from "../../../gen/ts/agentd/v1/service_pb.js";
export * from "../../../gen/ts/agentd/v1/session_pb.js";
export * from "../../../gen/ts/agentd/v1/watch_pb.js";
