package coordinator

import (
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writtenLease is a grant Lease as the coordinator's own write left it:
// the Lease the API server returned, or, once deleted, which object it
// deleted.
type writtenLease struct {
	lease   *coordinationv1.Lease // nil once deleted
	version uint64                // lease's resourceVersion
	deleted types.UID             // the deleted object's UID
}

// resourceVersion parses an object's resourceVersion; 0 if it is not a
// number (then the informer's copy wins).
func resourceVersion(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// writtenLeases are the Leases of one kind (grants, or maintenance slots)
// as the coordinator's own writes left them, by name, until the informer
// catches up.
type writtenLeases map[string]writtenLease

// merge is the Leases as the coordinator now knows them: the informer's
// (cached), except where its own write is newer (the informer has not
// caught up), and without those it deleted until the informer agrees. So
// a lagging informer never makes it grant twice or count a released grant
// as held. Entries the informer has caught up with are forgotten.
func (written writtenLeases) merge(cached []*coordinationv1.Lease) []*coordinationv1.Lease {
	byName := make(map[string]*coordinationv1.Lease, len(cached))
	for _, l := range cached {
		byName[l.Name] = l
	}
	for name, w := range written {
		l, ok := byName[name]
		switch {
		case w.lease == nil && ok && l.UID == w.deleted:
			delete(byName, name) // deleted; the informer has not seen it yet
		case w.lease == nil:
			delete(written, name) // the informer agrees it is gone (or has a new one)
		case ok && resourceVersion(l.ResourceVersion) >= w.version:
			delete(written, name) // the informer has caught up
		default:
			byName[name] = w.lease // newer than the informer's, or not yet seen
		}
	}
	out := make([]*coordinationv1.Lease, 0, len(byName))
	for _, l := range byName {
		out = append(out, l)
	}
	return out
}

// mergeLeases is the grant Leases as the coordinator now knows them (see
// writtenLeases.merge).
func (c *controller) mergeLeases(cached []*coordinationv1.Lease) []*coordinationv1.Lease {
	return c.written.merge(cached)
}

// wrote remembers a Lease the API server returned from a write.
func (written writtenLeases) wrote(l *coordinationv1.Lease) {
	written[l.Name] = writtenLease{lease: l, version: resourceVersion(l.ResourceVersion)}
}

// deleted remembers that Lease name, the object with uid, is gone.
func (written writtenLeases) deleted(name string, uid types.UID) {
	written[name] = writtenLease{deleted: uid}
}

// wrote remembers a grant Lease the API server returned from a write.
func (c *controller) wrote(l *coordinationv1.Lease) { c.written.wrote(l) }

// deleted remembers that grant Lease name, the object with uid, is gone.
func (c *controller) deleted(name string, uid types.UID) { c.written.deleted(name, uid) }
