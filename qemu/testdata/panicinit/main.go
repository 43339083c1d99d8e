// Command panicinit is the init of a firmware that never comes up: it says so on the
// console and exits, so the kernel panics ("Attempted to kill init!") and, with panic=-1,
// reboots at once. The update tests install it as a bad release: the boot loader must
// run out of tries and bring the old slot back by itself (a boot loop is what gokrazy's
// early A/B scheme could not get out of).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("EDGEGATE-PANICINIT this firmware never comes up")
	os.Exit(1)
}
