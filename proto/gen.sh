#!/usr/bin/env bash
# Regenerates the Go code, the HTTP/JSON gateway of logic.v1.Api and its
# OpenAPI 3 document from the .proto files with pinned generators.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$(go env GOPATH)/bin:$PATH"
need() { command -v "$1" >/dev/null 2>&1; }
need protoc || { echo "protoc missing: apt-get install -y protobuf-compiler libprotobuf-dev" >&2; exit 1; }
GATEWAY=v2.34.0
GNOSTIC=v0.7.1
[ "$(protoc-gen-go --version 2>/dev/null)" = "protoc-gen-go v1.36.12" ] || GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ "$(protoc-gen-go-grpc --version 2>/dev/null)" = "protoc-gen-go-grpc 1.6.2" ] || GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# protoc-gen-grpc-gateway and protoc-gen-openapi print no usable version:
# a stamp file beside them records the pinned version last installed.
stamp="$(go env GOPATH)/bin/.spark-gen-versions"
want="grpc-gateway $GATEWAY gnostic $GNOSTIC"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! need protoc-gen-grpc-gateway || ! need protoc-gen-openapi; then
  GOFLAGS= go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$GATEWAY
  GOFLAGS= go install github.com/google/gnostic/cmd/protoc-gen-openapi@$GNOSTIC
  echo "$want" >"$stamp"
fi
# google/api/annotations.proto and http.proto (the google.api.http option)
# come from the gnostic module, through the Go module proxy like any module.
googleapis="$(GOFLAGS= go mod download -json github.com/google/gnostic@$GNOSTIC | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')/cmd/protoc-gen-openapi/examples"
[ -f "$googleapis/google/api/annotations.proto" ] || { echo "google/api/annotations.proto not found under $googleapis" >&2; exit 1; }
for f in $(find . -name '*.proto' | sort); do
  protoc -I . -I "$googleapis" --go_out=. --go_opt=paths=source_relative \
    --go-grpc_out=. --go-grpc_opt=paths=source_relative "$f"
done
protoc -I . -I "$googleapis" --grpc-gateway_out=. --grpc-gateway_opt=paths=source_relative \
  logic/v1/api.proto
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
protoc -I . -I "$googleapis" --openapi_out="$tmp" \
  --openapi_opt=naming=proto --openapi_opt=fq_schema_naming=false --openapi_opt=default_response=false \
  --openapi_opt=title="Spark IM business API" --openapi_opt=version=v1 \
  logic/v1/api.proto
# protoc-gen-openapi writes YAML; logic serves JSON (/openapi.json).
GOFLAGS= go run ./internal/yamltojson <"$tmp/openapi.yaml" >logic/v1/openapi.json
