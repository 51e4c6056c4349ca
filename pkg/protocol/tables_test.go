package protocol

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
)

// The client contract is written down three times: the Go constants
// (this package and pkg/errcode, the truth), the TypeScript SDK's tables
// (sdk/ts/src/protocol.ts) and docs/protocol.md. TestTablesMatchGo fails
// when either copy lacks, adds or renumbers an entry.

const (
	repoRoot = "../.."
	sdkFile  = "sdk/ts/src/protocol.ts"
	docFile  = "docs/protocol.md"
)

// goNameAliases maps a Go constant's name, in UPPER_SNAKE form, to the
// protocol's name where the Go name is a shorthand.
var goNameAliases = map[string]string{
	"SYNC_MESSAGES_DONE": "SYNC_MESSAGES_FINISH", // CmdSyncMessagesDone
	"NOT_AUTHED":         "NOT_AUTHENTICATED",    // errcode.NotAuthed
}

// table maps an entry's value (a command number, a code) to its name;
// names are "" where a copy does not name its entries.
type table map[string]string

func TestTablesMatchGo(t *testing.T) {
	cmds := goConsts(t, "command.go", "Cmd", "uint16")
	events := goConsts(t, "command.go", "Event", "")
	convTypes := goConsts(t, "command.go", "Conversation", "")
	codes := goConsts(t, "../errcode/errcode.go", "", "Code")

	// The parsed Go tables against the compiled ones, so a constant the
	// parser missed cannot hide an entry.
	// 1..25 are contiguous; 26–39 are pre-assigned to features that land
	// one by one, so only those may be missing (reserved).
	for n := 1; n <= int(MaxKnownCommand); n++ {
		if _, ok := cmds[strconv.Itoa(n)]; !ok && (n <= int(CmdReaction) || n == int(MaxKnownCommand)) {
			t.Errorf("command %d (≤ MaxKnownCommand %d) has no Cmd constant in command.go", n, MaxKnownCommand)
		}
	}
	for v := range cmds {
		if n, _ := strconv.Atoi(v); n < 1 || n > int(MaxKnownCommand) {
			t.Errorf("command.go has Cmd constant %s past MaxKnownCommand %d", v, MaxKnownCommand)
		}
	}
	if len(codes) != len(errcode.All()) {
		t.Errorf("errcode.go has %d codes, errcode.All() lists %d", len(codes), len(errcode.All()))
	}
	for _, c := range errcode.All() {
		if _, ok := codes[string(c)]; !ok {
			t.Errorf("errcode.All() lists %q, which errcode.go does not declare", c)
		}
	}

	sdk := readFile(t, sdkFile)
	doc := readFile(t, docFile)
	tests := []struct {
		name  string
		want  table
		got   table
		names bool // compare names as well as values
	}{
		{"sdk Cmd", cmds, tsTable(t, sdk, "Cmd"), true},
		{"sdk Code", codes, tsTable(t, sdk, "Code"), true},
		{"sdk EventType", events, tsTable(t, sdk, "EventType"), true},
		{"sdk ConversationType", convTypes, tsTable(t, sdk, "ConversationType"), true},
		{"protocol.md commands", cmds, docTable(t, doc, "commands", 1), true},
		{"protocol.md errors", codes, docTable(t, doc, "errors", -1), false},
		{"protocol.md events", events, docTable(t, doc, "events", 1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, d := range diff(tt.want, tt.got, tt.names) {
				t.Error(d)
			}
		})
	}
}

// diff lists what got lacks, adds or names differently than want.
func diff(want, got table, names bool) []string {
	var out []string
	for v, name := range want {
		g, ok := got[v]
		switch {
		case !ok:
			out = append(out, "missing "+v+" "+name)
		case names && g != name:
			out = append(out, v+" is named "+g+", Go says "+name)
		}
	}
	for v, name := range got {
		if _, ok := want[v]; !ok {
			out = append(out, "has "+v+" "+name+", which Go does not")
		}
	}
	sort.Strings(out)
	return out
}

// goConsts reads the constants of file whose names start with prefix
// (and, when typ is set, are declared with that type), as value → name
// in UPPER_SNAKE form without the prefix.
func goConsts(t *testing.T, file, prefix, typ string) table {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	out := table{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if typ != "" {
				id, ok := vs.Type.(*ast.Ident)
				if !ok || id.Name != typ {
					continue
				}
			}
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, prefix) || n.Name == prefix || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: %s is not a literal; teach this test to read it", file, n.Name)
				}
				v := lit.Value
				if lit.Kind == token.STRING {
					v, _ = strconv.Unquote(v)
				}
				name := snake(strings.TrimPrefix(n.Name, prefix))
				if a, ok := goNameAliases[name]; ok {
					name = a
				}
				if prev, dup := out[v]; dup {
					t.Fatalf("%s: %s and %s share the value %s", file, prev, name, v)
				}
				out[v] = name
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no constants with prefix %q", file, prefix)
	}
	return out
}

// snake turns a Go name into UPPER_SNAKE: GenerateMsgID → GENERATE_MSG_ID,
// P2P → P2P.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || nextLower && unicode.IsUpper(r[i-1]) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(c))
	}
	return b.String()
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatalf("read %s (the test runs in pkg/protocol of the repository): %v", rel, err)
	}
	return string(b)
}

var (
	tsComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	tsEntry   = regexp.MustCompile(`([A-Z][A-Z0-9_]*)\s*:\s*("[^"]*"|\d+)`)
)

// tsTable reads `export const name = { KEY: value, … } as const` from the
// SDK's source.
func tsTable(t *testing.T, src, name string) table {
	t.Helper()
	src = tsComment.ReplaceAllString(src, "")
	re := regexp.MustCompile(`export const ` + name + `\s*=\s*\{([^}]*)\}`)
	m := re.FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no `export const %s = {…}`", sdkFile, name)
	}
	out := table{}
	for _, e := range tsEntry.FindAllStringSubmatch(m[1], -1) {
		v := strings.Trim(e[2], `"`)
		if prev, dup := out[v]; dup {
			t.Fatalf("%s: %s.%s and %s.%s share the value %s", sdkFile, name, prev, name, e[1], v)
		}
		out[v] = e[1]
	}
	return out
}

// docRows returns the cells of the markdown table after
// `<!-- table:name -->` in docs/protocol.md, header and separator left out.
func docRows(t *testing.T, doc, name string) [][]string {
	t.Helper()
	marker := "<!-- table:" + name + " -->"
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s: no %s", docFile, marker)
	}
	var rows [][]string
	n := 0
	for _, line := range strings.Split(doc[i+len(marker):], "\n")[1:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			break
		}
		n++
		if n <= 2 { // the header and the separator
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.Trim(strings.TrimSpace(cells[j]), "`")
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the table after %s is empty", docFile, marker)
	}
	return rows
}

// docTable reads a table of docs/protocol.md as value (its first column)
// → name (column nameCol; -1: none).
func docTable(t *testing.T, doc, name string, nameCol int) table {
	t.Helper()
	out := table{}
	for _, cells := range docRows(t, doc, name) {
		n := ""
		if nameCol >= 0 && nameCol < len(cells) {
			n = cells[nameCol]
		}
		if prev, dup := out[cells[0]]; dup {
			t.Fatalf("%s table %s: %s and %s share the value %s", docFile, name, prev, n, cells[0])
		}
		out[cells[0]] = n
	}
	return out
}

// TestHeaderTableMatchesCodec checks docs/protocol.md's header layout
// against the codec: each field's documented offset and size, read
// big-endian from a header frame.PutHeader wrote, give back its value.
func TestHeaderTableMatchesCodec(t *testing.T) {
	h := frame.Header{Command: 0x0102, Flags: 0x0304, RequestID: 0x05060708090a0b0c, SequenceID: 0x0d0e0f10, BodyLength: 0x11121314}
	var b [frame.HeaderSize]byte
	frame.PutHeader(b[:], h)
	want := map[string]uint64{
		"Magic": uint64(frame.Magic), "Version": uint64(frame.Version), "Command": uint64(h.Command),
		"Flags": uint64(h.Flags), "RequestID": h.RequestID, "SequenceID": uint64(h.SequenceID), "BodyLength": uint64(h.BodyLength),
	}
	seen := map[string]bool{}
	for _, cells := range docRows(t, readFile(t, docFile), "header") {
		if len(cells) < 3 {
			t.Fatalf("header table row %q: want offset | size | field", cells)
		}
		field := cells[2]
		off, err := strconv.Atoi(cells[0])
		if err != nil {
			t.Fatalf("header table: offset %q of %s", cells[0], field)
		}
		if field == "Body" {
			if off != frame.HeaderSize {
				t.Errorf("header table: Body at %d, the header is %d bytes", off, frame.HeaderSize)
			}
			continue
		}
		size, err := strconv.Atoi(cells[1])
		if err != nil || off+size > frame.HeaderSize {
			t.Fatalf("header table: %s at %q size %q does not fit the header", field, cells[0], cells[1])
		}
		var got uint64
		for _, c := range b[off : off+size] {
			got = got<<8 | uint64(c)
		}
		w, ok := want[field]
		switch {
		case !ok:
			t.Errorf("header table: unknown field %s", field)
		case got != w:
			t.Errorf("header table: %s at offset %d size %d reads %#x, the codec wrote %#x", field, off, size, got, w)
		}
		seen[field] = true
	}
	for f := range want {
		if !seen[f] {
			t.Errorf("header table: no row for %s", f)
		}
	}
}
