package provider_test

import (
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

func TestParseToolArgumentsAndEstimate(t *testing.T) {
	if s := provider.ParseToolArguments(`{"a":`); len(s.Fields) != 0 {
		t.Errorf("partial JSON must give {}: %v", s)
	}
	if s := provider.ParseToolArguments(`{"a":1}`); s.Fields["a"].GetNumberValue() != 1 {
		t.Errorf("got %v", s)
	}
	if s := provider.ParseToolArguments(`[1]`); len(s.Fields) != 0 {
		t.Errorf("non-object must give {}: %v", s)
	}
	for in, want := range map[string]int64{"": 0, "abc": 1, "abcd": 1, "abcde": 2, "😀😀": 1, "默认端口": 1} {
		if got := provider.EstimateTokens(in); got != want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestComputeCost(t *testing.T) {
	u := &agentdv1.Usage{Input: 1_000_000, Output: 500_000, CacheRead: 2_000_000}
	provider.ComputeCost(provider.Price{Input: 3, Output: 15, CacheRead: 0.3}, u)
	if c := u.Cost; c.Input != 3 || c.Output != 7.5 || c.CacheRead != 0.6 || c.Total != 11.1 {
		t.Errorf("cost = %v", c)
	}
}
