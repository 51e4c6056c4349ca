package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
)

func TestNormalizeDSNRefusesSettingsThatBreakTheGuarantees(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		ok        bool
	}{
		{"plain", "root@tcp(127.0.0.1:3306)/im", true},
		{"repeatable read named", "root@tcp(127.0.0.1:3306)/im?transaction_isolation=%27REPEATABLE-READ%27", true},
		{"autocommit on", "root@tcp(127.0.0.1:3306)/im?autocommit=1", true},
		{"read committed", "root@tcp(127.0.0.1:3306)/im?transaction_isolation=%27READ-COMMITTED%27", false},
		{"read uncommitted, old name", "root@tcp(127.0.0.1:3306)/im?tx_isolation=%27READ-UNCOMMITTED%27", false},
		{"serializable", "root@tcp(127.0.0.1:3306)/im?transaction_isolation=SERIALIZABLE", false},
		{"autocommit off", "root@tcp(127.0.0.1:3306)/im?autocommit=0", false},
		{"not a dsn", "tcp(127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := store.NormalizeDSN(tc.dsn)
			if (err == nil) != tc.ok {
				t.Fatalf("NormalizeDSN(%q) = %q, %v; want ok=%v", tc.dsn, out, err, tc.ok)
			}
			if err == nil && !strings.Contains(out, "interpolateParams=true") {
				t.Fatalf("NormalizeDSN(%q) = %q: no interpolateParams", tc.dsn, out)
			}
		})
	}
}

func TestCheckIsolationAcceptsRepeatableReadOnlyFromTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dsn, db := testenv.MySQL(t)
	if err := store.New(db).CheckIsolation(ctx); err != nil {
		t.Fatalf("the test server's default: %v", err)
	}
	// A session the server gives READ COMMITTED (as a server-wide setting
	// would), opened past NormalizeDSN's refusal.
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	rc, err := sqlx.Open("mysql", dsn+sep+"tx_isolation=%27READ-COMMITTED%27")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := store.New(rc).CheckIsolation(ctx); !errors.Is(err, store.ErrIsolation) {
		t.Fatalf("READ-COMMITTED sessions: %v, want ErrIsolation", err)
	}
}
