// Command agentctl is a terminal client of agentd for people and scripts:
// subcommands that reach every part of the AgentService, with readable
// output by default and one protojson object per line with --json.
//
// Usage:
//
//	agentctl sessions list
//	agentctl prompt SESSION "text"
//	agentctl transcript SESSION
//
// The address and token come from --addr and --token, or AGENTD_ADDRESS
// and AGENTD_TOKEN (default 127.0.0.1:7777).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if len(os.Args) > 1 && os.Args[1] == "chat" {
		// chat handles Ctrl-C itself: it aborts the run being answered,
		// and at the prompt the line editor reads it as a key.
		signals = signals[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// exitError carries an exit code other than 1 (a run that ended in error
// or was aborted), and a message for standard error when there is one.
type exitError struct {
	code    int
	message string
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// run executes agentctl with args and returns its exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	app := &app{out: stdout, getenv: getenv}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	app.close()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.message != "" {
			fmt.Fprintln(stderr, "agentctl:", ee.message)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "agentctl:", app.explain(err))
	return 1
}

// app holds the connection and the output settings of one invocation.
type app struct {
	out    io.Writer
	getenv func(string) string

	addr, token, tlsCA string
	json               bool

	conn   *grpc.ClientConn
	client agentdv1.AgentServiceClient
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "agentctl",
		Short:         "A terminal client of agentd",
		Long:          "agentctl talks to a running agentd: sessions, prompts, transcripts, the context the model sees, branches and more.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	addr := a.getenv("AGENTD_ADDRESS")
	if addr == "" {
		addr = "127.0.0.1:7777"
	}
	root.PersistentFlags().StringVar(&a.addr, "addr", addr, "agentd's address, host:port or unix:///path (AGENTD_ADDRESS)")
	root.PersistentFlags().StringVar(&a.token, "token", a.getenv("AGENTD_TOKEN"), "the token agentd was started with (AGENTD_TOKEN)")
	root.PersistentFlags().StringVar(&a.tlsCA, "tls-ca", a.getenv("AGENTD_TLS_CA"), "connect with TLS, trusting this CA certificate file (AGENTD_TLS_CA)")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print one protojson object per line")
	root.AddCommand(a.sessionsCommand(), a.promptCommand(), a.attachCommand(), a.transcriptCommand(), a.contextCommand(),
		a.treeCommand(), a.modelsCommand(), a.toolSourcesCommand(), a.healthCommand(), a.labelCommand(), a.redactCommand(), a.navigateCommand(), a.forkCommand(), a.compactCommand(),
		a.exportCommand(), a.importCommand(), a.chatCommand(), a.rulesCommand(), a.runsCommand())
	root.AddCommand(a.runControlCommands()...)
	return root
}

// connect dials agentd once per invocation.
func (a *app) connect(ctx context.Context) (context.Context, agentdv1.AgentServiceClient, error) {
	if a.client == nil {
		creds := insecure.NewCredentials()
		if a.tlsCA != "" {
			c, err := credentials.NewClientTLSFromFile(a.tlsCA, "")
			if err != nil {
				return nil, nil, err
			}
			creds = c
		}
		conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, nil, err
		}
		a.conn, a.client = conn, agentdv1.NewAgentServiceClient(conn)
	}
	if a.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.token)
	}
	return ctx, a.client, nil
}

func (a *app) close() {
	if a.conn != nil {
		a.conn.Close()
	}
}

// explain turns an error into one line that says what to do, ending with
// agentd's reason for a refusal (such as "[SESSION_BUSY]") that scripts
// can match.
func (a *app) explain(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	line := a.explainStatus(st)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == refusalDomain {
			line += " [" + info.GetReason() + "]"
		}
	}
	return line
}

func (a *app) explainStatus(st *status.Status) string {
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Sprintf("agentd is not running at %s: start it with `make run`, or pass --addr (%s)", a.addr, st.Message())
	case codes.Unauthenticated:
		return "agentd refused the credentials: pass the token it was started with as --token or AGENTD_TOKEN (" + st.Message() + ")"
	case codes.NotFound:
		return "not found: " + st.Message()
	case codes.InvalidArgument:
		return "invalid request: " + st.Message()
	case codes.FailedPrecondition:
		return "not now: " + st.Message()
	}
	return fmt.Sprintf("%s: %s", st.Code(), st.Message())
}
