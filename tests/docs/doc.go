// Package docs holds the check of the repository's operator documentation:
// links_test.go resolves every relative link and file reference in the
// Markdown files operators read, so a renamed file or heading breaks
// `go test` instead of a reader's trust. readme_test.go keeps the
// top-level README a front door of at most 200 lines and checks that it
// and docs/README.md link every page of docs/. changelog_test.go keeps
// each kind of change once per version of CHANGELOG.md. Nothing here is
// imported; the package exists for its tests.
package docs
