package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// Marshal encodes v as the wire contract writes JSON: without HTML
// escaping, so `<`, `>` and `&` stay one byte each. encoding/json's
// default turns each into six bytes, which would let a message of `<`
// grow sixfold between the size check at send and the frames that carry
// it (docs/protocol.md §3). Everything the server writes for a
// client or stores for one goes through here.
func Marshal(v any) ([]byte, error) {
	buf := encBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledEncBuf {
			buf.Reset()
			encBufs.Put(buf)
		}
	}()
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("protocol: marshal %T: %w", v, err)
	}
	// Encode ends with a newline the wire does not want.
	b := buf.Bytes()
	return append([]byte(nil), b[:len(b)-1]...), nil
}

// encBufs recycles encoding buffers; maxPooledEncBuf keeps one large
// message from pinning a large buffer.
var encBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledEncBuf = 64 << 10
