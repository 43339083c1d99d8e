// Command point calls a fault point, for TestNoTraceWithoutTag: built without the tag
// egfault, its binary must not hold the hook.
package main

import "github.com/edgegate/edgegate/daemon/internal/fault"

func main() { fault.Point(fault.LBAnnounce) }
