package compaction

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStandardLibraryOnly keeps the pure core pure: no package outside the
// standard library (no bbolt, protoactor, msgpack), no I/O or clock
// packages.
func TestStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	forbidden := []string{"os", "io", "io/fs", "net", "time", "math/rand", "math/rand/v2", "crypto/rand", "unsafe", "syscall", "os/exec", "sync"}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			require.NotContains(t, first, ".", "%s imports %s: only the standard library is allowed", name, path)
			require.NotContains(t, forbidden, path, "%s imports %s: the pure core does no I/O and reads no clock", name, path)
		}
	}
}
