// Package plantest is the shared test support of the proxy modes' plans: the demo lab's
// address plan and fixtures, a packet-flow tracer per mode (NewNFTTracer, NewIPTTracer,
// NewIPVSTracer) behind one Tracer interface, the scenario table every mode runs
// (Scenarios, RunScenarios) and the fuzz world of every mode's FuzzPlan.
package plantest

import (
	"slices"
	"strings"
)

// Tracer is one mode's packet-flow tracer over its plan of one family.
type Tracer interface {
	// Results lists the distinct results a packet can have, sorted, with the masquerade
	// marker: "10.200.2.11:8080 (masqueraded)", "REJECT".
	Results(Packet) []string
	// All returns every outcome, with the rules that fired, in choice order.
	All(Packet) []Outcome
}

// Trails renders outcomes with the rules that fired, for failure messages.
func Trails(os []Outcome) string {
	var b strings.Builder
	for _, o := range os {
		b.WriteString(o.String() + ":\n\t" + strings.Join(o.Matched, "\n\t") + "\n")
	}
	return b.String()
}

// distinct lists the distinct results of outcomes, sorted, with the masquerade marker.
func distinct(os []Outcome) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}
