package virtual

import (
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// informer adapts one hand-built shared informer to the typed informer
// interfaces virtual-kubelet's pod controller takes (Informer() and
// Lister()), without client-go's informer factory, which would register
// informers for every API group.
type informer[L any] struct {
	inf       cache.SharedIndexInformer
	newLister func(cache.Indexer) L
}

func (i informer[L]) Informer() cache.SharedIndexInformer { return i.inf }
func (i informer[L]) Lister() L                           { return i.newLister(i.inf.GetIndexer()) }

// newInformer is an informer that is never started: its lister is always
// empty. It satisfies the pod controller's config where the feature that
// reads it (resolving pods' environment) is off.
func newInformer[L any](obj runtime.Object, newLister func(cache.Indexer) L) informer[L] {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, obj, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return informer[L]{inf: inf, newLister: newLister}
}

// unusedInformers are the config map, secret and service informers the pod
// controller requires but, with SkipDownwardAPIResolution, never reads.
type unusedInformers struct {
	configMaps informer[corelisters.ConfigMapLister]
	secrets    informer[corelisters.SecretLister]
	services   informer[corelisters.ServiceLister]
}
