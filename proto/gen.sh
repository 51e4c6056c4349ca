#!/usr/bin/env bash
# Regenerates the Go code from the .proto files with pinned generators.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$(go env GOPATH)/bin:$PATH"
need() { command -v "$1" >/dev/null 2>&1; }
need protoc || { echo "protoc missing: apt-get install -y protobuf-compiler libprotobuf-dev" >&2; exit 1; }
[ "$(protoc-gen-go --version 2>/dev/null)" = "protoc-gen-go v1.36.12" ] || GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ "$(protoc-gen-go-grpc --version 2>/dev/null)" = "protoc-gen-go-grpc 1.6.2" ] || GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
for f in $(find . -name '*.proto' | sort); do
  protoc -I . --go_out=. --go_opt=paths=source_relative \
    --go-grpc_out=. --go-grpc_opt=paths=source_relative "$f"
done
