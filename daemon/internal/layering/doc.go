// Package layering holds a test, and nothing else, that keeps the module's import graph
// in the shape DESIGN.md draws: see layering_test.go.
package layering
