package api

import "github.com/sparkim/spark/pkg/clusterauth"

// MetadataKey carries a business API key.
const MetadataKey = "x-api-key"

// Prefix is the full-method prefix of the business API.
const Prefix = "/logic.v1.Api/"

// NewKeyGuard returns the guard of the business API: its calls must carry
// one of keys (blank keys are ignored; with none every API call is
// refused); other services pass through untouched.
func NewKeyGuard(keys []string) *clusterauth.Guard {
	return clusterauth.NewKeyGuard(MetadataKey, keys, Prefix)
}
