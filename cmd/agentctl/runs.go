package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// runsCommand is `runs list|show`: a session's run records (GetRun,
// ListRuns).
func (a *app) runsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "List and show a session's runs"}
	var outcomes, metadata []string
	var after, before string
	var limit int
	list := &cobra.Command{
		Use: "list SESSION", Short: "List a session's runs, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &agentdv1.ListRunsRequest{SessionId: args[0], MetadataFilter: map[string]string{}}
			for _, o := range outcomes {
				v, ok := agentdv1.RunOutcome_value["RUN_OUTCOME_"+strings.ToUpper(o)]
				if !ok {
					return fmt.Errorf("--outcome %q: use completed, aborted, error, interrupted, budget_exceeded, output_invalid or unspecified (active)", o)
				}
				req.Outcomes = append(req.Outcomes, agentdv1.RunOutcome(v))
			}
			for _, kv := range metadata {
				k, v, _ := strings.Cut(kv, "=")
				req.MetadataFilter[k] = v
			}
			var err error
			if req.StartTimeAfter, err = flagTime("--after", after); err != nil {
				return err
			}
			if req.StartTimeBefore, err = flagTime("--before", before); err != nil {
				return err
			}
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			shown := 0
			for {
				resp, err := c.ListRuns(ctx, req)
				if err != nil {
					return err
				}
				for _, r := range resp.GetRuns() {
					if limit > 0 && shown == limit {
						return nil
					}
					shown++
					if err := a.print(r, func() {
						fmt.Fprintf(a.out, "%s  %-15s  %s  %s\n", r.GetId(), outcomeName(r.GetOutcome()),
							r.GetStartTime().AsTime().Local().Format(time.DateTime), metadataText(r.GetRequest().GetMetadata()))
					}); err != nil {
						return err
					}
				}
				if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
					return nil
				}
			}
		},
	}
	list.Flags().StringSliceVar(&outcomes, "outcome", nil, "only runs with this outcome (completed, error, aborted, ..., unspecified for the active run); repeatable")
	list.Flags().StringArrayVar(&metadata, "metadata", nil, "only runs whose metadata has key=value (key= matches any value); repeatable")
	list.Flags().StringVar(&after, "after", "", "only runs started at or after this RFC 3339 time")
	list.Flags().StringVar(&before, "before", "", "only runs started before this RFC 3339 time")
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many runs (0: all)")
	show := &cobra.Command{
		Use: "show SESSION RUN", Short: "Show one run: its times, outcome, request, usage and answer", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.GetRun(ctx, &agentdv1.GetRunRequest{SessionId: args[0], RunId: args[1]})
			if err != nil {
				return err
			}
			r := resp.GetRun()
			return a.print(r, func() {
				end := "-"
				if r.GetEndTime() != nil {
					end = r.GetEndTime().AsTime().Local().Format(time.DateTime)
				}
				req := r.GetRequest()
				fmt.Fprintf(a.out, "id:       %s\nsession:  %s\noutcome:  %s\nstarted:  %s\nended:    %s\nmethod:   %s\nprompt:   %s\nmetadata: %s\n",
					r.GetId(), r.GetSessionId(), outcomeName(r.GetOutcome()), r.GetStartTime().AsTime().Local().Format(time.DateTime), end,
					req.GetMethod(), req.GetPromptEntryId(), metadataText(req.GetMetadata()))
				if m := req.GetModel(); m != nil {
					fmt.Fprintf(a.out, "model:    %s/%s\n", m.GetProvider(), m.GetId())
				}
				if u := r.GetUsage(); u != nil {
					fmt.Fprintf(a.out, "usage:    %d tokens in, %d out, $%.4f\n", u.GetInput()+u.GetCacheRead()+u.GetCacheWrite(), u.GetOutput(), u.GetCost().GetTotal())
				}
				if r.GetErrorMessage() != "" {
					fmt.Fprintf(a.out, "error:    %s\n", r.GetErrorMessage())
				}
				if o := r.GetStructuredOutput(); o != nil {
					b, _ := protojson.Marshal(o)
					fmt.Fprintf(a.out, "output:   %s\n", b)
				}
			})
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}

// flagTime parses an optional RFC 3339 time flag.
func flagTime(flag, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: write an RFC 3339 time, such as 2025-01-02T15:04:05Z", flag, v)
	}
	return timestamppb.New(t), nil
}

func outcomeName(o agentdv1.RunOutcome) string {
	if o == agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED {
		return "ACTIVE"
	}
	return strings.TrimPrefix(o.String(), "RUN_OUTCOME_")
}

// metadataText is metadata as sorted k=v pairs.
func metadataText(md map[string]string) string {
	pairs := make([]string, 0, len(md))
	for k, v := range md {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, " ")
}
