// Command etcd is etcd's server built from the go.etcd.io/etcd/server/v3 module pinned in this
// module's go.mod, so that the test cluster's etcd comes from the same module graph as its
// kube-apiserver. It is etcd's own main (go.etcd.io/etcd/v3's main.go) without the rest of
// that module: etcdmain does all the work.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
