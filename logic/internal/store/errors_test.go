package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestIsRetryableCoversMariaDBGaleraAndTiDBLockErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"innodb deadlock / galera certification failure", &mysql.MySQLError{Number: 1213}, true},
		{"lock wait timeout", &mysql.MySQLError{Number: 1205}, true},
		{"wrapped deadlock", fmt.Errorf("store: insert: %w", &mysql.MySQLError{Number: 1213}), true},
		{"tidb select for update cannot retry", &mysql.MySQLError{Number: 8002}, true},
		{"tidb txn retryable", &mysql.MySQLError{Number: 8022}, true},
		{"tidb write conflict", &mysql.MySQLError{Number: 9007}, true},
		{"tidb pd timeout", &mysql.MySQLError{Number: 9001}, true},
		{"tidb region unavailable", &mysql.MySQLError{Number: 9005}, true},
		{"tidb pessimistic lock retry limit", &mysql.MySQLError{Number: 1105, Message: "pessimistic lock retry limit reached"}, true},
		{"other unknown error", &mysql.MySQLError{Number: 1105, Message: "runtime error: index out of range"}, false},
		{"duplicate entry", &mysql.MySQLError{Number: 1062}, false},
		{"tidb 9006 gc too early", &mysql.MySQLError{Number: 9006}, false},
		{"not a mysql error", errors.New("boom"), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
