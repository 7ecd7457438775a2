// Package daemon assembles one agentd: it opens the store a DSN names
// (a SQLite file, or a PostgreSQL database shared by several replicas),
// builds the agent over it, the gRPC service and server over both (with
// the interceptors, health and reflection of service.NewServer), serves
// them on a listener and shuts them down in order.
//
// cmd/agentd, service/servicetest and the tests and benchmarks of package
// service all start agentd through New, so there is one assembly. The
// package takes values already parsed; flags and environment variables
// stay in cmd/agentd.
//
// The dependency runs one way: daemon imports service, agent, metrics and
// the store engines, and none of them imports daemon.
package daemon
