// Package jsonid is the JSON form of 64-bit ids: written as decimal strings
// (they exceed JavaScript's 2^53), read from either a string or a number.
package jsonid

import (
	"bytes"
	"fmt"
	"strconv"
)

// ID is an int64 id with string JSON encoding.
type ID int64

// MarshalJSON writes the id as a decimal string.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts "123", 123 and null (zero). Fractions, exponents,
// empty strings and out-of-range values are errors.
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*id = 0
		return nil
	}
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		b = b[1 : len(b)-1]
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("jsonid: %q is not a 64-bit integer id", b)
	}
	*id = ID(v)
	return nil
}

// String returns the decimal form.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// Int64 returns the id as int64.
func (id ID) Int64() int64 { return int64(id) }
