//go:build !egfault

package fault

// Enabled says whether this build injects faults: only a test image's, built with the tag
// egfault.
const Enabled = false

// Point is where a test could inject a fault into the calling goroutine; without the tag
// egfault it does nothing, and the compiler drops the call.
func Point(string) {}
