package drill

import (
	"fmt"
	"slices"
	"strings"

	"github.com/selftaint/selftaint/taints/fleet"
)

// holdsSlot: the node's maintenance condition says it holds a maintenance
// slot (True, with one of SlotReasons).
func holdsSlot(v NodeVersion) bool {
	return v.Conditions[string(fleet.MaintenanceCondition)] == "True" && slices.Contains(SlotReasons(), v.Maintenance)
}

// maintenance judges MaintenanceExpect: at every node version from t=0 on
// (and at t=0), the nodes whose latest version holds a maintenance slot
// (holdsSlot) are at most AtMost.
func (ev *evaluator) maintenance(e *MaintenanceExpect) Result {
	if len(ev.nodes) == 0 {
		return failed("no node of the drill was seen, expected at most %d in maintenance", e.AtMost)
	}
	best := ev.maxAtOnce(holdsSlot)
	res := Result{
		Passed: best.most <= e.AtMost,
		Measured: Measured{
			MaxMaintenanceNodes: ptr(best.most), MaxMaintenanceAtSeconds: ptr(ev.at(best.at)),
			MaintenanceNodes: best.which,
		},
	}
	res.Message = fmt.Sprintf("at most %d %s in maintenance (holding a slot: %s) at once%s, expected at most %d",
		best.most, plural(best.most, "node", "nodes"), strings.Join(SlotReasons(), ", "), ev.onAt(best), e.AtMost)
	return res
}
