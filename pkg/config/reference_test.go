package config

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// formatDefault writes a default as the reference table shows it: a
// duration in its shortest form (168h, 2m, 10s), a list comma-separated
// as its environment variable takes it ([] when empty), an empty string
// as "".
func formatDefault(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		return x
	case time.Duration:
		s := x.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []string:
		if len(x) == 0 {
			return "[]"
		}
		return strings.Join(x, ",")
	default:
		return fmt.Sprint(x)
	}
}

// referenceRow is one key of docs/configuration.md's reference table.
type referenceRow struct {
	def, env string
}

// readReference parses the table whose header is
// "| key | default | env | meaning |".
func readReference(t *testing.T, path string) map[string]referenceRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]referenceRow{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| key | default | env | meaning |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			return rows
		case strings.HasPrefix(line, "| ---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 4 {
			t.Fatalf("%s: row %q has %d cells, want key | default | env | meaning", path, line, len(cells))
		}
		unquote := func(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
		key := unquote(cells[0])
		if _, dup := rows[key]; dup {
			t.Errorf("%s: %s documented twice", path, key)
		}
		rows[key] = referenceRow{def: unquote(cells[1]), env: unquote(cells[2])}
	}
	if !in {
		t.Fatalf("%s: no reference table (| key | default | env | meaning |)", path)
	}
	return rows
}

// docs/configuration.md documents every key with its default and its
// environment variable, and nothing that is not a key.
func TestReferenceMatchesDefaults(t *testing.T) {
	rows := readReference(t, "../../docs/configuration.md")
	for _, s := range Settings(Default()) {
		r, ok := rows[s.Key]
		if !ok {
			t.Errorf("docs/configuration.md lacks %s (default %s, %s)", s.Key, formatDefault(s.Default), s.Env())
			continue
		}
		delete(rows, s.Key)
		if want := formatDefault(s.Default); r.def != want {
			t.Errorf("docs/configuration.md: %s defaults to %q, Default() to %q", s.Key, r.def, want)
		}
		if r.env != s.Env() {
			t.Errorf("docs/configuration.md: %s's variable is %q, want %q", s.Key, r.env, s.Env())
		}
	}
	for k := range rows {
		t.Errorf("docs/configuration.md documents %s, which is not a key", k)
	}
}
