// Package migrations holds the ordered MySQL schema files, embedded so the
// migrate command needs nothing beside its binary.
package migrations

import "embed"

// Files are the migrations, named NNNN_description.sql and applied in name
// order.
//
//go:embed *.sql
var Files embed.FS
