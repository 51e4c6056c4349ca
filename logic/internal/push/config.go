package push

import (
	"fmt"
	"strings"

	"github.com/sparkim/spark/pkg/config"
)

// ProvidersFrom builds the providers the push section configures: APNs
// when it names a key file, FCM when it names a credentials file, and one
// gateway per push.gateways entry. A file that cannot be read or parsed
// fails logic's start rather than every notification later.
func ProvidersFrom(c config.Push) (Providers, error) {
	var p Providers
	client, err := httpClient(c.CAFile, c.SendTimeout)
	if err != nil {
		return p, err
	}
	if c.APNs.KeyFile != "" {
		key, err := LoadAPNsKey(c.APNs.KeyFile)
		if err != nil {
			return p, err
		}
		a, err := NewAPNs(APNsConfig{Key: key, KeyID: c.APNs.KeyID, TeamID: c.APNs.TeamID,
			Endpoint: strings.TrimRight(c.APNs.Endpoint, "/"), SandboxHost: strings.TrimRight(c.APNs.SandboxEndpoint, "/"), Client: client})
		if err != nil {
			return p, err
		}
		p.APNs = a
	}
	if c.FCM.CredentialsFile != "" {
		sa, err := LoadServiceAccount(c.FCM.CredentialsFile)
		if err != nil {
			return p, err
		}
		f, err := NewFCM(sa, strings.TrimRight(c.FCM.Endpoint, "/"), client)
		if err != nil {
			return p, err
		}
		p.FCM = f
	}
	if len(c.Gateways) > 0 {
		secret, err := LoadGatewaySecret(c.GatewaySecretFile)
		if err != nil {
			return p, err
		}
		p.Gateways = make(map[string]Provider, len(c.Gateways))
		for _, g := range c.Gateways {
			name, url, ok := strings.Cut(g, "=")
			if !ok {
				return p, fmt.Errorf("push: push.gateways entry %q: want name=https://url", g)
			}
			p.Gateways[name] = NewGateway(url, secret, client)
		}
	}
	return p, nil
}
