package link

import (
	"fmt"
	"sync"
)

// Fake is Links over interfaces a test sets.
type Fake struct {
	mu    sync.Mutex
	links map[string]Link
}

var _ Links = (*Fake)(nil)

// NewFake returns a Fake holding links.
func NewFake(links ...Link) *Fake {
	f := &Fake{links: map[string]Link{}}
	for _, l := range links {
		f.Set(l)
	}
	return f
}

// Set adds l or replaces the interface of its name.
func (f *Fake) Set(l Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[l.Name] = l
}

// Delete removes the interface called name.
func (f *Fake) Delete(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.links, name)
}

func (f *Fake) ByName(name string) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return Link{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	return l, nil
}

func (f *Fake) Close() {}
