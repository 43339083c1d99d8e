package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/edgegate/edgegate/daemon/lb/byname"
)

// The Secret that holds a site's heartbeat key in cluster mode. It is created once, in the
// deploy step (deploy/README.md): RBAC can limit get, list and watch to one name, not create.
const (
	KeySecretNamespace = "kube-system"
	KeySecretName      = "edgegate-lb-heartbeat-key"
	// KeySecretKey holds the key heartbeats are signed with; KeySecretAccept, optional, a
	// second key whose heartbeats are taken too (a rotation in progress).
	KeySecretKey    = "key"
	KeySecretAccept = "accept"
)

// MinKeyBytes is the shortest heartbeat key taken.
const MinKeyBytes = 16

// ParseKey reads a heartbeat key (surrounding white space is not part of it, so a key file
// may end with a newline); what names where it came from.
func ParseKey(b []byte, what string) ([]byte, error) {
	key := bytes.TrimSpace(b)
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("%s: the key has %d bytes, want at least %d", what, len(key), MinKeyBytes)
	}
	return key, nil
}

// KeySecret gives a Group (one that awaits its key) the key of the Secret
// KeySecretNamespace/KeySecretName, and the new one whenever the Secret changes. Until a
// good key is read the Group stays silent, so the gateway owns no address: a gateway
// whose key cannot be read never runs unauthenticated.
type KeySecret struct {
	client kubernetes.Interface
	group  *Group
	log    *slog.Logger

	mu  sync.Mutex
	got []byte // what was last given to the group, to log changes only
}

// NewKeySecret returns a KeySecret for group, reading through client once it runs.
func NewKeySecret(client kubernetes.Interface, group *Group, log *slog.Logger) *KeySecret {
	return &KeySecret{client: client, group: group, log: log}
}

func (k *KeySecret) where() string { return "secret " + KeySecretNamespace + "/" + KeySecretName }

// Run follows the Secret until ctx ends: it says, until there is a key, why there is none,
// every minute at most.
func (k *KeySecret) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(k.log.Handler()))
	// Only this Secret, by name: deploy/rbac.yaml grants it by resourceNames.
	inf := byname.Informer(k.client, k.client.CoreV1().Secrets(KeySecretNamespace), KeySecretName, &v1.Secret{}, k.where())
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.read(o) },
		UpdateFunc: func(_, o any) { k.read(o) },
		DeleteFunc: func(any) {
			k.log.Warn("heartbeat key Secret deleted; the key read last stays in force", "secret", KeySecretNamespace+"/"+KeySecretName)
		},
	}); err != nil {
		return fmt.Errorf("heartbeat key: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { inf.RunWithContext(ctx) })
	k.explain(ctx)
	<-ctx.Done()
	return nil
}

// explain logs why there is no key yet, at once and then every minute, until there is one:
// asking the Secret by name says whether it is missing or not readable.
func (k *KeySecret) explain(ctx context.Context) {
	wait := 2 * time.Second // the informer's first list answers first, as a rule
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.group.keyed:
			return
		case <-time.After(wait):
		}
		_, err := k.client.CoreV1().Secrets(KeySecretNamespace).Get(ctx, KeySecretName, metav1.GetOptions{})
		if err == nil {
			err = errors.New("no good key in it (see the error above)")
		}
		k.log.Error("LoadBalancer IPs NOT announced: no heartbeat key, and heartbeats are never sent unsigned in cluster mode. "+
			"Create the Secret (deploy/README.md) or give --lb-key-file", "secret", KeySecretNamespace+"/"+KeySecretName, "err", err)
		wait = time.Minute
	}
}

// read takes in a version of the Secret; a bad one keeps the key in force.
func (k *KeySecret) read(o any) {
	s, ok := o.(*v1.Secret)
	if !ok {
		return
	}
	key, err := ParseKey(s.Data[KeySecretKey], k.where()+" data."+KeySecretKey)
	var accept [][]byte
	if extra, ok := s.Data[KeySecretAccept]; ok && err == nil {
		var a []byte
		if a, err = ParseKey(extra, k.where()+" data."+KeySecretAccept); err == nil {
			accept = [][]byte{a}
		}
	}
	if err != nil {
		k.log.Error("heartbeat key not changed: the Secret is invalid", "err", err)
		return
	}
	k.mu.Lock()
	fresh := !bytes.Equal(k.got, key) || len(accept) > 0
	k.got = key
	k.mu.Unlock()
	k.group.SetKeys(key, accept)
	if fresh {
		k.log.Info("heartbeat key read", "secret", KeySecretNamespace+"/"+KeySecretName, "accepting", 1+len(accept))
	}
}
