package taints

import "slices"

// Ownable is what an agent may own on its Node under its current config: the
// taints (by key and effect, as the API server tells taints apart) its
// rules, hardware and initialization can produce and the labels its
// hardware can set. The ownership records on the Node are
// trusted only within it.
//
// The records are annotations, and anyone who can annotate the Node can write
// them: an entry naming a key the config could never have produced was not
// written by this agent, and acting on it (removing "our" taint or label)
// would remove someone else's.
type Ownable struct {
	Taints map[TaintID]bool
	Labels map[string]bool
}

// TrustOwned splits a taint ownership record into the entries o allows and
// the rest.
func (o Ownable) TrustOwned(ids []TaintID) (trusted, ignored []TaintID) {
	return partition(ids, func(id TaintID) bool { return o.Taints[id] })
}

// TrustOwnedLabels splits a label ownership record into the keys o allows
// and the rest.
func (o Ownable) TrustOwnedLabels(keys []string) (trusted, ignored []string) {
	return partition(keys, func(k string) bool { return o.Labels[k] })
}

// partition splits xs by keep, keeping their order.
func partition[T any](xs []T, keep func(T) bool) (in, out []T) {
	for _, x := range xs {
		if keep(x) {
			in = append(in, x)
		} else {
			out = append(out, x)
		}
	}
	return slices.Clip(in), slices.Clip(out)
}
