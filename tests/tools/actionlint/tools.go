//go:build tools

// Package actionlint pins actionlint, which make verify runs on the
// forge's workflow files (.github/workflows). It is a module of its own
// so that its build list is upstream's and does not move the tools
// module's.
package actionlint

import _ "github.com/rhysd/actionlint/cmd/actionlint"
