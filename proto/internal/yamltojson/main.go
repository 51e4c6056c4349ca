// Command yamltojson converts the YAML that protoc-gen-openapi writes into
// the JSON document logic serves at /openapi.json (proto/gen.sh). Keys come
// out sorted, so the committed file changes only when the proto does.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "yamltojson:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var doc any
	if err := yaml.NewDecoder(in).Decode(&doc); err != nil {
		return fmt.Errorf("decode yaml: %w", err)
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}
