// Package sandbox confines the commands agentd's tools run (the bash
// tool, MCP servers the operator marks sandboxed) to what one session may
// reach, so a tool call never runs with agentd's own authority.
//
// On Linux a command runs under a helper: agentd's own binary started
// again as "agentd-sandbox", which the init of its package
// internal/confine recognizes before most of agentd initializes. The helper starts in new user, mount,
// PID, network, IPC and UTS namespaces, assembles a root file system of
// its own — the system trees read-only with their secrets hidden, the
// workspace writable (or only some of its subdirectories), a private
// /tmp, a few devices, its own /proc — enters it, brings up an empty
// loopback, sets resource limits, gives up every capability, sets
// no_new_privs, enters a Landlock domain and then execs the command. When
// agentd runs as root the command runs as an unprivileged identity
// (nobody by default) and the workspace is shown through an idmapped
// mount, so files stay owned by the workspace's owner.
//
// The command therefore cannot see agentd's database, configuration, other
// workspaces or processes, cannot reach the host's network (agentd's port
// included) unless its session may and asks to, and ends with its call:
// when its first process exits, the kernel ends every other process of its
// PID namespace.
package sandbox
