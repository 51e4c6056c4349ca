package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/gobwas/ws"
)

// wsPolicy is what the WebSocket listeners check at the upgrade: the
// Origin allow-list and where the client's real address comes from.
type wsPolicy struct {
	// origins is the allow-list, nil when any origin may connect. A
	// request without Origin is not a browser's, so the list (a
	// browser-side protection) does not apply; the token authenticates
	// either way.
	origins map[string]struct{}
	// realIPHeader, when set, carries the client's address from an HTTP
	// proxy in trusted; anyone else's header is ignored.
	realIPHeader string
	trusted      peerSet
}

// newWSPolicy parses gate.ws_allowed_origins and takes
// gate.ws_real_ip_header with the parsed trusted proxies (newTrustedPeers).
func newWSPolicy(origins []string, realIPHeader string, trusted peerSet) (*wsPolicy, error) {
	p := &wsPolicy{realIPHeader: realIPHeader}
	if len(origins) > 0 {
		p.origins = make(map[string]struct{}, len(origins))
		for _, o := range origins {
			p.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = struct{}{}
		}
	}
	if realIPHeader != "" {
		if len(trusted) == 0 {
			return nil, errors.New("server: gate.ws_real_ip_header is set but gate.proxy_trusted_cidrs is empty")
		}
		p.trusted = trusted
	}
	return p, nil
}

// upgrader builds one connection's upgrader: path /ws only, the Origin
// allow-list, and, from a trusted proxy, the client's address from the
// configured header into t.realIP (the session starts after the upgrade,
// so it never sees the proxy's address).
func (p *wsPolicy) upgrader(t *wsTransport) *ws.Upgrader {
	u := &ws.Upgrader{
		OnRequest: func(uri []byte) error {
			path := uri
			if i := bytes.IndexByte(path, '?'); i >= 0 {
				path = path[:i]
			}
			if string(path) != wsPath {
				return ws.RejectConnectionError(ws.RejectionStatus(404), ws.RejectionReason("not found"))
			}
			return nil
		},
	}
	fromProxy := p.realIPHeader != "" && p.trusted.contains(t.nc.RemoteAddr())
	if p.origins == nil && !fromProxy {
		return u
	}
	u.OnHeader = func(key, value []byte) error {
		switch {
		case p.origins != nil && strings.EqualFold(string(key), "Origin"):
			if _, ok := p.origins[strings.ToLower(string(value))]; !ok {
				return ws.RejectConnectionError(ws.RejectionStatus(403), ws.RejectionReason("origin not allowed"))
			}
		case fromProxy && strings.EqualFold(string(key), p.realIPHeader):
			ip, ok := lastForwardedAddr(value)
			if !ok {
				return ws.RejectConnectionError(ws.RejectionStatus(400), ws.RejectionReason("bad "+p.realIPHeader))
			}
			t.realIP = ip
		}
		return nil
	}
	return u
}

// lastForwardedAddr returns the last address of an X-Forwarded-For style
// list (or a lone X-Real-IP value): the one the nearest, trusted proxy
// appended; earlier entries are whatever the client claimed.
func lastForwardedAddr(v []byte) (string, bool) {
	s := string(v)
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		s = s[i+1:]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return "", false
	}
	return a.Unmap().String(), true
}

// requestWriter is the Upgrader's view of the connection: the request
// bytes already collected, and the connection (through TLS on wss) for
// the response.
type requestWriter struct {
	*bytes.Reader
	t *wsTransport
}

func (w requestWriter) Write(p []byte) (int, error) {
	if err := w.t.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// upgradeWS collects the upgrade request and answers it. It reports true
// once upgraded; false with a nil error while the request is incomplete.
// Bytes after the request stay in src for the frame decoder.
func (t *wsTransport) upgradeWS(src byteSource) (bool, error) {
	avail := src.Len()
	peek, err := src.Peek(avail)
	if err != nil {
		return false, fmt.Errorf("ws: peek request: %w", err)
	}
	// buf is the connection's own memory when anything is pending.
	buf := peek
	if len(t.req) > 0 {
		buf = append(t.req, peek...)
	}
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		if len(buf) > wsMaxRequest {
			_ = t.write([]byte("HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n"))
			return false, errors.New("ws: upgrade request too large")
		}
		if len(t.req) == 0 {
			buf = append([]byte(nil), peek...)
		}
		t.req = buf
		if _, err := src.Next(avail); err != nil {
			return false, fmt.Errorf("ws: skip request: %w", err)
		}
		return false, nil
	}
	end += 4
	req := buf[:end]
	if len(t.req) == 0 {
		req = append([]byte(nil), req...)
	}
	if _, err := src.Next(end - len(t.req)); err != nil {
		return false, fmt.Errorf("ws: skip request: %w", err)
	}
	t.req = nil
	if _, err := t.l.ws.upgrader(t).Upgrade(requestWriter{Reader: bytes.NewReader(req), t: t}); err != nil {
		return false, fmt.Errorf("ws: upgrade: %w", err)
	}
	t.upgraded.Store(true)
	t.timer.stop()
	return true, nil
}
