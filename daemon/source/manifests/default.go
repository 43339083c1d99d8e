package manifests

import (
	"embed"
	"io/fs"
)

//go:embed default/demo.yaml
var defaultFiles embed.FS

// Default returns the built-in demo manifests (default/demo.yaml): a dual-stack
// LoadBalancer Service "web" and a UDP Service "dns", each backed by the three backends of
// the demo lab. Load it with NewLoader.
func Default() fs.FS {
	sub, err := fs.Sub(defaultFiles, "default")
	if err != nil {
		panic("manifests: embedded default: " + err.Error()) // cannot happen: the path is a constant
	}
	return sub
}
