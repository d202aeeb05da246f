package app

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// Connection limits of the gRPC listener. gRPC serves every connection it
// accepts, and a caller holds one without a token until its first call is
// refused (the token is checked per call), so the listener bounds them.
const (
	// maxConnsPerHost bounds the connections one address holds open.
	// pillar-controller keeps one per agent and replica, and probes open a
	// few more for a moment; an address with more is not the controller.
	maxConnsPerHost = 16
	// maxConns bounds the connections of all addresses together.
	maxConns = 256
	// refusalLogInterval spaces the log lines of refused connections, so
	// a peer that reconnects in a loop cannot flood the log.
	refusalLogInterval = 10 * time.Second
)

// limitListener closes, at once, a connection over its address's limit
// or the total: queueing it would let one peer that holds connections open
// make the controller's wait.
type limitListener struct {
	net.Listener
	perHost, total int
	log            *slog.Logger
	now            func() time.Time

	mu      sync.Mutex
	open    int
	byHost  map[string]int
	refused int       // since the last log line
	logged  time.Time // when the last refusal was logged
}

func newLimitListener(ln net.Listener, perHost, total int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, perHost: perHost, total: total, log: log, now: time.Now, byHost: map[string]int{}}
}

// Accept returns the next connection within the limits, closing those
// over them.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		if l.acquire(host, c.RemoteAddr()) {
			return &limitedConn{Conn: c, release: sync.OnceFunc(func() { l.release(host) })}, nil
		}
		c.Close()
	}
}

func (l *limitListener) acquire(host string, addr net.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open < l.total && l.byHost[host] < l.perHost {
		l.open++
		l.byHost[host]++
		return true
	}
	l.refused++
	if now := l.now(); now.Sub(l.logged) >= refusalLogInterval {
		l.log.Warn("connection refused: too many open", "peer", addr.String(),
			"peer_connections", l.byHost[host], "max_per_peer", l.perHost,
			"connections", l.open, "max", l.total, "refused_since_last_line", l.refused)
		l.logged, l.refused = now, 0
	}
	return false
}

func (l *limitListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byHost[host]--; l.byHost[host] <= 0 {
		delete(l.byHost, host)
	}
}

// hostOf is the address a limit counts: the IP without the port.
func hostOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// limitedConn gives its slot back when closed, once.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
