package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
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

// Spec is Stripe's OpenAPI description, loaded by kin-openapi, to check
// objects against its component schemas.
type Spec struct {
	schemas openapi3.Schemas
}

// LoadSpec reads the spec stripe-mock ships. An object's properties are
// closed (additionalProperties false unless the spec says otherwise), so
// a field the spec does not have is a difference.
func LoadSpec() (*Spec, error) {
	path, err := SpecFile()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	closed := false
	seen := map[*openapi3.Schema]bool{}
	var closeObjects func(ref *openapi3.SchemaRef)
	closeObjects = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		sc := ref.Value
		seen[sc] = true
		if len(sc.Properties) > 0 && sc.AdditionalProperties.Has == nil && sc.AdditionalProperties.Schema == nil {
			sc.AdditionalProperties.Has = &closed
		}
		for _, p := range sc.Properties {
			closeObjects(p)
		}
		for _, alt := range sc.AnyOf {
			closeObjects(alt)
		}
		closeObjects(sc.Items)
		closeObjects(sc.AdditionalProperties.Schema)
	}
	for _, ref := range doc.Components.Schemas {
		closeObjects(ref)
	}
	return &Spec{schemas: doc.Components.Schemas}, nil
}

// Allow lets schema's objects have property (any value): a field of an
// older API version than the spec's.
func (s *Spec) Allow(schema, property string) error {
	sc, err := s.schema(schema)
	if err != nil {
		return err
	}
	sc.Properties[property] = openapi3.NewSchemaRef("", openapi3.NewSchema().WithNullable())
	return nil
}

// Unrequire makes property optional in schema: a field added after the
// API version checked.
func (s *Spec) Unrequire(schema, property string) error {
	sc, err := s.schema(schema)
	if err != nil {
		return err
	}
	if !slices.Contains(sc.Required, property) {
		return fmt.Errorf("%s does not require %s", schema, property)
	}
	sc.Required = slices.DeleteFunc(slices.Clone(sc.Required), func(r string) bool { return r == property })
	return nil
}

func (s *Spec) schema(name string) (*openapi3.Schema, error) {
	ref, ok := s.schemas[name]
	if !ok || ref.Value == nil {
		return nil, fmt.Errorf("no schema %s", name)
	}
	return ref.Value, nil
}

// Check compares v (decoded JSON) with the component schema name and
// returns every difference, sorted, each as "<name>.<path>: <reason>": a
// field the schema does not have, a value of the wrong JSON type or outside
// its enum, a required field missing, a null where none is allowed, a
// string over its length. Where no alternative of an anyOf fits, it
// reports the differences from the closest one.
func (s *Spec) Check(name string, v any) []string {
	sc, err := s.schema(name)
	if err != nil {
		return []string{err.Error()}
	}
	problems := s.check(sc, v, name)
	sort.Strings(problems)
	return problems
}

func (s *Spec) check(sc *openapi3.Schema, v any, at string) []string {
	err := sc.VisitJSON(v, openapi3.MultiErrors())
	if err == nil {
		return nil
	}
	var errs openapi3.MultiError
	if !errors.As(err, &errs) {
		errs = openapi3.MultiError{err}
	}
	var problems []string
	for _, e := range errs {
		var se *openapi3.SchemaError
		if !errors.As(e, &se) {
			problems = append(problems, at+": "+e.Error())
			continue
		}
		path := at + pointer(se.JSONPointer())
		if se.SchemaField == "anyOf" {
			problems = append(problems, s.closest(se.Schema.AnyOf, se.Value, path)...)
			continue
		}
		problems = append(problems, path+": "+se.Reason)
	}
	return problems
}

// closest returns the differences from the alternative that has fewest.
func (s *Spec) closest(alts openapi3.SchemaRefs, v any, at string) []string {
	var best []string
	for i, alt := range alts {
		p := s.check(alt.Value, v, at)
		if i == 0 || len(p) < len(best) {
			best = p
		}
	}
	if len(best) == 0 { // kin-openapi and the alternatives disagree
		return []string{at + ": matches no alternative of anyOf"}
	}
	return best
}

// pointer writes a JSON pointer as a path: .key and [index].
func pointer(p []string) string {
	var b strings.Builder
	for _, k := range p {
		if _, err := strconv.Atoi(k); err == nil {
			b.WriteString("[" + k + "]")
		} else {
			b.WriteString("." + k)
		}
	}
	return b.String()
}
