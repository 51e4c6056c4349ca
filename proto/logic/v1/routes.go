package logicv1

import (
	"net/http"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// HTTPRoute is the HTTP verb and path template of an Api method, read from
// its google.api.http option in api.proto: the one reading of the routes
// the HTTP/JSON door serves, for the tests that check the OpenAPI document
// and the docs' curl examples against them. ok is false for a method
// without the option or with a custom verb.
func HTTPRoute(m protoreflect.MethodDescriptor) (verb, path string, ok bool) {
	r, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get, true
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post, true
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put, true
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch, true
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete, true
	}
	return "", "", false
}
