package logicv1

import _ "embed"

// OpenAPI is the OpenAPI 3 document of the HTTP/JSON routes of Api, as
// proto/gen.sh generates it from the google.api.http options of api.proto;
// logic serves it at /openapi.json on logic.http_addr.
//
//go:embed openapi.json
var OpenAPI []byte
