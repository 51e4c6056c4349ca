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
)

// Errors returned by the store.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrDuplicateClientMsgID: a message with the same (sender,
	// conversation, client_msg_id) committed concurrently.
	ErrDuplicateClientMsgID = errors.New("store: duplicate client_msg_id")
	// ErrDuplicateMsgID: the chosen MsgId is taken.
	ErrDuplicateMsgID = errors.New("store: duplicate msg id")
)

// IsRetryable reports a deadlock or lock wait timeout: the transaction was
// rolled back and may be run again.
func IsRetryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == erLockDeadlock || me.Number == erLockWaitTimeout
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
