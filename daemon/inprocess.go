package daemon

import "google.golang.org/grpc"

// InProcess returns a client connection to this agentd's gRPC server that
// stays inside the process (see service.Server.InProcess), for HTTP front
// ends mounted beside it. The caller closes it.
func (d *Daemon) InProcess() (*grpc.ClientConn, error) { return d.server.InProcess() }
