package store

import (
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers the store reacts to.
const (
	erDupEntry        = 1062
	erLockDeadlock    = 1213
	erLockWaitTimeout = 1205
	// TiDB's "Unknown error", retryable only when it reports a lock or
	// conflict (retryableUnknown).
	erTiDBUnknown = 1105
)

// retryableTiDB are TiDB's codes for a transaction that lost a lock or
// write conflict, or hit a store or region that is busy, unavailable or
// being moved: the transaction was rolled back and may run again, as
// after an InnoDB deadlock. 8002: SELECT … FOR UPDATE cannot be retried
// internally; 8022: the transaction is safe to retry; 9007: write
// conflict; 9001–9005: PD or TiKV server timeout, TiKV busy, lock
// resolution timeout, region unavailable.
var retryableTiDB = map[uint16]bool{
	8002: true, 8022: true, 9007: true,
	9001: true, 9002: true, 9003: true, 9004: true, 9005: true,
}

// Errors returned by the store.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrDuplicateClientMsgID: a message with the same (sender,
	// conversation, client_msg_id) committed concurrently.
	ErrDuplicateClientMsgID = errors.New("store: duplicate client_msg_id")
	// ErrDuplicateMsgID: the chosen MsgId is taken.
	ErrDuplicateMsgID = errors.New("store: duplicate msg id")
)

// IsRetryable reports a deadlock or lock wait timeout (a Galera
// certification failure is a deadlock too), or TiDB's equivalents: the
// transaction was rolled back and may be run again. It is the one place
// that decides; every retry loop of the store asks it.
func IsRetryable(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch {
	case me.Number == erLockDeadlock, me.Number == erLockWaitTimeout, retryableTiDB[me.Number]:
		return true
	case me.Number == erTiDBUnknown:
		return retryableUnknown(me.Message)
	}
	return false
}

// retryableUnknown: TiDB reports some lock failures only as error 1105
// with a message, e.g. "pessimistic lock retry limit reached". Any other
// 1105 is not known to be safe to repeat.
func retryableUnknown(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"pessimistic lock retry limit reached", "write conflict", "deadlock", "lock wait timeout", "txnlocknotfound", "try again later"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// duplicateKey returns the key name of a duplicate-entry error ("" if err is
// not one). MariaDB and MySQL 8 name it "PRIMARY" or "tbl.key" / "key".
func duplicateKey(err error) (string, bool) {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != erDupEntry {
		return "", false
	}
	i := strings.LastIndex(me.Message, "for key '")
	if i < 0 {
		return "", true
	}
	k := strings.TrimSuffix(me.Message[i+len("for key '"):], "'")
	if j := strings.LastIndexByte(k, '.'); j >= 0 {
		k = k[j+1:]
	}
	return k, true
}
