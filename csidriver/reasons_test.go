package csidriver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// reasonArg is, per function or method name, the index of the argument
// that is a condition or event reason.
var reasonArg = map[string]int{
	"Eventf":      3, // events.EventRecorder: regarding, related, type, reason
	"event":       2, // (*Service).event and (*VolumeStateReconciler).event: v, type, reason
	"recordEvent": 3, // rec, v, type, reason
	"notReady":    0,
	"ready":       0,
	"pending":     0,
	"writeStatus": 2, // ctx, v, reason
}

// TestReasonsAreConstants holds that every condition and event reason the
// controller sets is a constant of api/v1alpha1 (reasons.go), which the
// generated reference (docs/reference/reasons.md) lists: a string literal
// as a reason, or in a Reason field, fails.
func TestReasonsAreConstants(t *testing.T) {
	fset := token.NewFileSet()
	var checked int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var name string
				switch fun := n.Fun.(type) {
				case *ast.Ident:
					name = fun.Name
				case *ast.SelectorExpr:
					name = fun.Sel.Name
				}
				if i, ok := reasonArg[name]; ok && i < len(n.Args) && isString(n.Args[i]) {
					t.Errorf("%s: %s's reason is the literal %s: use a Reason constant of api/v1alpha1", fset.Position(n.Args[i].Pos()), name, n.Args[i].(*ast.BasicLit).Value)
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Reason" && isString(n.Value) {
					t.Errorf("%s: Reason is the literal %s: use a Reason constant of api/v1alpha1", fset.Position(n.Value.Pos()), n.Value.(*ast.BasicLit).Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d files: the walk did not find the module's sources", checked)
	}
}

func isString(e ast.Expr) bool {
	l, ok := e.(*ast.BasicLit)
	return ok && l.Kind == token.STRING
}
