package virtual

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/selftaint/selftaint/taints/fleet"
)

// NotVirtualError says a Node with the name of one of the virtual nodes
// exists and is not a virtual node: serving it would take over a real
// node (report its pods Running, relabel it, delete it on exit).
type NotVirtualError struct {
	// Node is the Node's name.
	Node string
}

func (e *NotVirtualError) Error() string {
	return fmt.Sprintf("node %s exists and is not a virtual node (it lacks the label %s=true): refusing to serve it", e.Node, LabelVirtual)
}

// IsVirtual reports whether n is a virtual node: labelled
// selftaint.io/virtual=true, as every virtual node registers.
func IsVirtual(n *corev1.Node) bool { return fleet.IsVirtual(n) }

// registration is what this process knows of the Node object it serves
// under one name.
type registration struct {
	mu  sync.Mutex // guards uid
	uid types.UID  // of the Node registered or adopted; empty if none yet
}

func (r *registration) set(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uid = uid
}

func (r *registration) get() types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.uid
}

// checkExisting reads each name's Node before anything serves it: a Node
// that exists and is not virtual fails the whole set (a NotVirtualError),
// and an existing virtual one (left by an earlier run) is adopted.
func checkExisting(ctx context.Context, nodes typedcorev1.NodeInterface, names []string) (map[string]*registration, error) {
	regs := make(map[string]*registration, len(names))
	for _, name := range names {
		reg := &registration{}
		regs[name] = reg
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("virtual: checking for an existing node %s: %w", name, err)
		case !IsVirtual(n):
			return nil, fmt.Errorf("virtual: %w", &NotVirtualError{Node: name})
		}
		reg.set(n.UID)
	}
	return regs, nil
}

// guardedNodes is the Nodes client virtual-kubelet's node controller gets.
// It never hands virtual-kubelet a Node that is not virtual, so a real Node
// created under a virtual node's name (between checkExisting and
// registration, or after the virtual one was deleted) is not patched: the
// node controller's Get fails with a NotVirtualError instead. It records
// the UID of the Node it creates.
type guardedNodes struct {
	typedcorev1.NodeInterface
	reg *registration
}

// Get returns the Node if it is virtual.
func (g guardedNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	n, err := g.NodeInterface.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if !IsVirtual(n) {
		return nil, &NotVirtualError{Node: name}
	}
	return n, nil
}

// Create registers the Node and records its UID.
func (g guardedNodes) Create(ctx context.Context, n *corev1.Node, opts metav1.CreateOptions) (*corev1.Node, error) {
	created, err := g.NodeInterface.Create(ctx, n, opts)
	if err == nil {
		g.reg.set(created.UID)
	}
	return created, err
}

// deleteNodes removes, after the process stops serving them, the Nodes it
// registered or adopted: only the same Node object (a UID precondition),
// and only while it is still virtual. A Node someone else created under
// the name meanwhile, or one no longer labelled virtual, is left alone.
func deleteNodes(nodes typedcorev1.NodeInterface, regs map[string]*registration, names []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range names {
		if err := deleteNode(ctx, nodes, name, regs[name].get()); err != nil {
			log.Warn("not deleting virtual node on exit", "node", name, "err", err)
			continue
		}
		log.Info("virtual node deleted", "node", name)
	}
}

// errNotOurs says the Node under a name is not the one this process served.
type errNotOurs struct {
	node     string
	uid, our types.UID
}

func (e *errNotOurs) Error() string {
	if e.our == "" {
		return fmt.Sprintf("node %s (uid %s) was never registered by this process", e.node, e.uid)
	}
	return fmt.Sprintf("node %s was recreated by someone else (uid %s, ours was %s)", e.node, e.uid, e.our)
}

// deleteNode deletes Node name if it is the virtual Node with UID uid. The
// delete's preconditions are the UID and the resourceVersion it checked, so
// neither a Node recreated meanwhile nor one relabelled meanwhile is
// deleted; a conflict reads the Node again. It returns nil if that Node is
// gone.
func deleteNode(ctx context.Context, nodes typedcorev1.NodeInterface, name string, uid types.UID) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading node %s: %w", name, err)
		case uid == "" || n.UID != uid:
			return &errNotOurs{node: name, uid: n.UID, our: uid}
		case !IsVirtual(n):
			return &NotVirtualError{Node: name}
		}
		rv := n.ResourceVersion
		err = nodes.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err // a Conflict is retried
	})
}

// notVirtual reports whether err says a Node is not virtual.
func notVirtual(err error) bool {
	var nv *NotVirtualError
	return errors.As(err, &nv)
}
