package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/agentclient"
)

// Connector finds the connection to a PillarAgent: it resolves the address
// (spec.address, else the InternalIP of spec.nodeName), the port and the
// TLS material, and hands them to the pool, which reuses the connection
// while they stay the same. The PillarAgent reconciler, the PillarStore
// reconciler and the CSI Controller service share one Connector.
type Connector struct {
	// Client reads Nodes and Secrets (the manager's cached client).
	Client client.Reader
	// SecretNamespaces are the namespaces whose Secrets an agent's
	// spec.tls may name: the controller is granted and caches Secrets only
	// there. Empty allows none (no agent can use TLS); "*" allows every
	// namespace.
	SecretNamespaces []string
	// Pool holds the connections.
	Pool *agentclient.Pool
	// Now is the clock certificate expiry is checked against; time.Now if
	// nil.
	Now func() time.Time
}

// ConnectError is why an agent cannot be dialed: Reason is a condition
// reason (NodeNotFound, NodeAddressMissing, TLSSecretMissing,
// TLSSecretInvalid), Message says what to do.
type ConnectError struct {
	Reason  string
	Message string
	Err     error
}

func (e *ConnectError) Error() string { return e.Message }
func (e *ConnectError) Unwrap() error { return e.Err }

// Connect returns the connection to agent a.
func (c *Connector) Connect(ctx context.Context, a *v1alpha1.PillarAgent) (*agentclient.Conn, error) {
	t, err := c.Target(ctx, a)
	if err != nil {
		return nil, err
	}
	return c.Pool.Get(a.Name, t)
}

// Target resolves where and how agent a is reached.
func (c *Connector) Target(ctx context.Context, a *v1alpha1.PillarAgent) (agentclient.Target, error) {
	host := a.Spec.Address
	if host == "" {
		var err error
		if host, err = c.nodeAddress(ctx, string(a.Spec.NodeName)); err != nil {
			return agentclient.Target{}, err
		}
	}
	port := a.Spec.Port
	if port == 0 {
		port = export.DefaultAgentPort
	}
	t := agentclient.Target{Address: net.JoinHostPort(host, strconv.Itoa(int(port)))}
	if a.Spec.TLS == nil {
		return t, nil
	}
	ref := a.Spec.TLS.SecretRef
	if !slices.Contains(c.SecretNamespaces, string(ref.Namespace)) && !slices.Contains(c.SecretNamespaces, "*") {
		return agentclient.Target{}, &ConnectError{Reason: v1alpha1.ReasonTLSSecretNotAllowed,
			Message: fmt.Sprintf("TLS Secret %s/%s is in a namespace pillar-controller may not read: it reads Secrets only in %s (its -tls-secret-namespaces; "+
				"with the chart, tls.mode other than none, and controller.tlsSecretNamespaces for other namespaces, which also grants the Role there)",
				ref.Namespace, ref.Name, namespaceList(c.SecretNamespaces))}
	}
	var s corev1.Secret
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: string(ref.Namespace), Name: string(ref.Name)}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return agentclient.Target{}, &ConnectError{Reason: v1alpha1.ReasonTLSSecretMissing, Err: err,
				Message: fmt.Sprintf("TLS Secret %s/%s does not exist: create it with the keys ca.crt, tls.crt and tls.key, or remove spec.tls", ref.Namespace, ref.Name)}
		}
		return agentclient.Target{}, &ConnectError{Reason: v1alpha1.ReasonTLSSecretUnavailable, Err: err,
			Message: fmt.Sprintf("cannot read TLS Secret %s/%s: %v (pillar-controller reads Secrets only in the namespaces of its -tls-secret-namespaces flag)", ref.Namespace, ref.Name, err)}
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	cfg, digest, err := agentclient.ClientTLS(s.Data, a.Spec.TLS.ServerName, t.Address, now())
	if err != nil {
		var me *agentclient.MaterialError
		key := "?"
		if errors.As(err, &me) {
			key = me.Key
		}
		return agentclient.Target{}, &ConnectError{Reason: v1alpha1.ReasonTLSSecretInvalid, Err: err,
			Message: fmt.Sprintf("TLS Secret %s/%s, key %s: %v", ref.Namespace, ref.Name, key, errors.Unwrap(err))}
	}
	t.TLS, t.Material = cfg, digest
	return t, nil
}

func (c *Connector) nodeAddress(ctx context.Context, name string) (string, error) {
	var n corev1.Node
	if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &ConnectError{Reason: v1alpha1.ReasonNodeNotFound, Err: err,
				Message: fmt.Sprintf("Node %q does not exist: correct spec.nodeName, or set spec.address", name)}
		}
		return "", &ConnectError{Reason: v1alpha1.ReasonNodeUnavailable, Err: err, Message: fmt.Sprintf("cannot read Node %q: %v", name, err)}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return a.Address, nil
		}
	}
	return "", &ConnectError{Reason: v1alpha1.ReasonNodeAddressMissing,
		Message: fmt.Sprintf("Node %q reports no InternalIP address: set spec.address to the agent's address", name)}
}

// callReason names the condition reason for a failed agent call.
func callReason(err error) string {
	s := err.Error()
	if strings.Contains(s, "authentication handshake failed") || strings.Contains(s, "x509:") || strings.Contains(s, "tls:") {
		return v1alpha1.ReasonTLSFailed
	}
	return v1alpha1.ReasonUnreachable
}

// hostOf is the host part of host:port.
func hostOf(endpoint string) string {
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		return h
	}
	return endpoint
}

// namespaceList names the namespaces for a message.
func namespaceList(ns []string) string {
	if len(ns) == 0 {
		return "no namespace"
	}
	return strings.Join(ns, ", ")
}
