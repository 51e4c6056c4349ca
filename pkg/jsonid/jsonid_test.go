package jsonid

import (
	"encoding/json"
	"testing"
)

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		in      string
		want    ID
		wantErr bool
	}{
		{`"7301234567890123456"`, 7301234567890123456, false},
		{`7301234567890123456`, 7301234567890123456, false},
		{`"0"`, 0, false},
		{`null`, 0, false},
		{`"-5"`, -5, false},
		{`""`, 0, true},
		{`1.5`, 0, true},
		{`1e3`, 0, true},
		{`"99999999999999999999"`, 0, true},
		{`"12a"`, 0, true},
		{`true`, 0, true},
	}
	for _, tt := range tests {
		var v struct {
			ID ID `json:"id"`
		}
		err := json.Unmarshal([]byte(`{"id":`+tt.in+`}`), &v)
		if (err != nil) != tt.wantErr || (!tt.wantErr && v.ID != tt.want) {
			t.Errorf("%s: got %d err %v", tt.in, v.ID, err)
		}
	}
}

func TestMarshal(t *testing.T) {
	b, _ := json.Marshal(struct {
		ID ID `json:"id"`
	}{7301234567890123456})
	if string(b) != `{"id":"7301234567890123456"}` {
		t.Fatal(string(b))
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`"1"`, `1`, `null`, `"-9223372036854775808"`, `1e3`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id ID
		if err := id.UnmarshalJSON(b); err != nil {
			return
		}
		out, _ := id.MarshalJSON()
		var back ID
		if err := back.UnmarshalJSON(out); err != nil || back != id {
			t.Fatalf("%q -> %d -> %s", b, id, out)
		}
	})
}
