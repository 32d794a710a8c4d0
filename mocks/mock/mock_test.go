package mock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// typeNames returns the exported types declared in dir's non-test files
// whose declaration interface picks (an interface, or any type).
func typeNames(t *testing.T, dir string, interfaces bool) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, isInterface := ts.Type.(*ast.InterfaceType); isInterface || !interfaces {
					names[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	return names
}

// TestEveryInterfaceHasAFake: the package doc's promise, kept as reconcile
// grows: each interface reconcile declares has a fake of the same name
// here (and each fake asserts it implements its interface).
func TestEveryInterfaceHasAFake(t *testing.T) {
	interfaces := typeNames(t, "../../reconcile", true)
	fakes := typeNames(t, ".", false)
	require.NotEmpty(t, interfaces)
	for name := range interfaces {
		require.True(t, fakes[name], "reconcile.%s has no fake in mocks/mock", name)
	}
}
