package openapi

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// SpecFile returns the path of the OpenAPI spec (spec3.json) that the pinned
// stripe-mock embeds, from the module cache (downloading the module if it
// is not there yet).
func SpecFile() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", Module)
	cmd.Dir = os.TempDir() // outside any module: nothing to edit
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", Module, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", Module, err)
	}
	if mod.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", Module, mod.Error)
	}
	return filepath.Join(mod.Dir, "embedded", "openapi", "spec3.json"), nil
}

// Spec is Stripe's OpenAPI description, enough of it to check objects
// against its component schemas.
type Spec struct {
	Schemas map[string]*Schema
	// Ignore, when set, drops the problems it accepts (say, the known gap
	// between the API version checked and the spec's), also while choosing
	// an anyOf alternative.
	Ignore func(problem string) bool
}

// Schema is the part of an OpenAPI schema the checks use.
type Schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Nullable             bool               `json:"nullable"`
	Enum                 []any              `json:"enum"`
	AnyOf                []*Schema          `json:"anyOf"`
	Properties           map[string]*Schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *Schema            `json:"items"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
}

// LoadSpec reads the spec stripe-mock ships.
func LoadSpec() (*Spec, error) {
	path, err := SpecFile()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Components struct {
			Schemas map[string]*Schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &Spec{Schemas: doc.Components.Schemas}, nil
}

// Check compares v (decoded JSON) with the component schema name and
// returns every difference: a field the schema does not have, a value of
// the wrong JSON type or outside its enum, a required field missing, a null
// where none is allowed. anyOf takes the first alternative that fits. It is
// not a full JSON Schema validator: formats, lengths and patterns are not
// checked.
func (s *Spec) Check(name string, v any) []string {
	sc, ok := s.Schemas[name]
	if !ok {
		return []string{"no schema " + name}
	}
	var problems []string
	s.check(sc, v, name, &problems)
	problems = s.relevant(problems)
	sort.Strings(problems)
	return problems
}

func (s *Spec) relevant(problems []string) []string {
	if s.Ignore == nil {
		return problems
	}
	return slices.DeleteFunc(problems, s.Ignore)
}

func (s *Spec) resolve(sc *Schema) *Schema {
	for sc.Ref != "" {
		sc = s.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
	}
	return sc
}

func (s *Spec) check(sc *Schema, v any, at string, problems *[]string) {
	sc = s.resolve(sc)
	if v == nil {
		if !sc.Nullable {
			*problems = append(*problems, at+": null is not allowed")
		}
		return
	}
	if len(sc.AnyOf) > 0 {
		var best []string
		for i, alt := range sc.AnyOf {
			var p []string
			s.check(alt, v, at, &p)
			if p = s.relevant(p); len(p) == 0 {
				return
			}
			if i == 0 || len(p) < len(best) {
				best = p
			}
		}
		*problems = append(*problems, best...)
		return
	}
	if len(sc.Enum) > 0 && !slices.Contains(sc.Enum, v) {
		*problems = append(*problems, fmt.Sprintf("%s: %v is not one of %v", at, v, sc.Enum))
	}
	switch sc.Type {
	case "string":
		if _, ok := v.(string); !ok {
			*problems = append(*problems, fmt.Sprintf("%s: want a string, got %T", at, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			*problems = append(*problems, fmt.Sprintf("%s: want a boolean, got %T", at, v))
		}
	case "integer":
		if n, ok := v.(float64); !ok || n != math.Trunc(n) {
			*problems = append(*problems, fmt.Sprintf("%s: want an integer, got %v", at, v))
		}
	case "number":
		if _, ok := v.(float64); !ok {
			*problems = append(*problems, fmt.Sprintf("%s: want a number, got %T", at, v))
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: want an array, got %T", at, v))
			return
		}
		for i, e := range a {
			if sc.Items != nil {
				s.check(sc.Items, e, fmt.Sprintf("%s[%d]", at, i), problems)
			}
		}
	case "object", "":
		m, ok := v.(map[string]any)
		if !ok {
			if sc.Type == "object" {
				*problems = append(*problems, fmt.Sprintf("%s: want an object, got %T", at, v))
			}
			return
		}
		for _, r := range sc.Required {
			if _, ok := m[r]; !ok {
				*problems = append(*problems, at+"."+r+": required, missing")
			}
		}
		var extra *Schema
		open := len(sc.Properties) == 0 // a free-form object
		if len(sc.AdditionalProperties) > 0 {
			open = string(sc.AdditionalProperties) != "false"
			if sc.AdditionalProperties[0] == '{' { // else true or false
				_ = json.Unmarshal(sc.AdditionalProperties, &extra)
			}
		}
		for k, val := range m {
			switch prop, ok := sc.Properties[k]; {
			case ok:
				s.check(prop, val, at+"."+k, problems)
			case extra != nil:
				s.check(extra, val, at+"."+k, problems)
			case !open:
				*problems = append(*problems, at+"."+k+": not in the spec")
			}
		}
	}
}
