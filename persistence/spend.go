package persistence

import agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"

// Spend is what model calls cost: the tokens they used and their price in
// US dollars, as the provider adapters report them.
type Spend struct {
	Tokens  int64
	CostUSD float64
}

// Add returns the sum of s and o.
func (s Spend) Add(o Spend) Spend {
	return Spend{Tokens: s.Tokens + o.Tokens, CostUSD: s.CostUSD + o.CostUSD}
}

// EntrySpend is what an entry records as spent: the usage of an assistant
// message (its total tokens and total cost); ok is false for every other
// entry and for an answer that used nothing. Engines store it beside the
// entry, so spending is summed without decoding payloads.
func EntrySpend(e *agentdv1.Entry) (s Spend, ok bool) {
	u := e.GetMessage().GetAssistant().GetUsage()
	s = Spend{Tokens: u.GetTotalTokens(), CostUSD: u.GetCost().GetTotal()}
	return s, s.Tokens != 0 || s.CostUSD != 0
}
