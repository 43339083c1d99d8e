// Package webui holds the dashboard's static files (plain HTML, CSS and JavaScript, no build
// step), embedded in the binary that daemon/dashboard serves them from.
package webui

import "embed"

// Files are the page and its assets.
//
//go:embed index.html app.js style.css
var Files embed.FS
