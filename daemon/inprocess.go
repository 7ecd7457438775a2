package daemon

import "github.com/agentd/agentd/service"

// InProcess returns a client connection to this agentd's gRPC server that
// stays inside the process (see service.Server.InProcess), for HTTP front
// ends mounted beside it. The caller closes it.
func (d *Daemon) InProcess() (*service.InProcessConn, error) { return d.server.InProcess() }
