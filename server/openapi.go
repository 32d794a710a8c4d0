package server

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
)

// openapiYAML describes the admin and app APIs (OpenAPI 3.1). The API
// tests check every request and answer against it (server/openapitest),
// so it cannot drift from the handlers.
//
//go:embed openapi.yaml
var openapiYAML []byte

// openapiJSON is openapiYAML as JSON, made once at start: the document is
// part of the binary, so a document that does not convert is a build
// mistake every test catches.
var openapiJSON = mustJSON(openapiYAML)

// OpenAPI returns the OpenAPI document of the admin and app APIs, as JSON
// (what GET /api/openapi.json answers).
func OpenAPI() []byte { return openapiJSON }

func mustJSON(y []byte) []byte {
	var v any
	if err := yaml.Unmarshal(y, &v); err != nil {
		panic(fmt.Sprintf("server/openapi.yaml: %v", err))
	}
	b, err := json.Marshal(jsonValue(v))
	if err != nil {
		panic(fmt.Sprintf("server/openapi.yaml as JSON: %v", err))
	}
	return b
}

// jsonValue turns YAML's maps with non-string keys (a status code written
// 200 rather than "200") into JSON objects.
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonValue(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonValue(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonValue(e)
		}
		return v
	default:
		return v
	}
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiJSON)
}
