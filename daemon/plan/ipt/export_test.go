package ipt

import (
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// PlannedWith is the configuration p planned with last.
func PlannedWith(p *Planner) plan.Config { return p.cfg }

// OwnChains are the chains p planned for the service port n, and whether it planned n.
func OwnChains(p *Planner, n model.ServicePortName) ([]*Chain, bool) {
	f, ok := p.frags[n]
	if !ok {
		return nil, false
	}
	return f.chains, true
}

// PortChain names a service port's chain of a kind (SVC, SVL, EXT, FW).
var PortChain = portChain
