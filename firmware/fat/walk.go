package fat

import (
	"fmt"
	"io"
)

type nodeState uint8

const (
	kept    nodeState = iota
	deleted           // the repair marks the entry deleted
	gone              // inside a directory the repair deletes: nothing is written for it
)

// node is a directory entry the walk met; nodes are kept in walk (depth-first) order, so
// the entries below a directory follow it.
type node struct {
	parent int32
	end    int32 // directories: the index past the last node below it
	index  int32 // the slot index of the short entry in its directory
	name   string
	short  shortEntry
	off    int64   // byte offset of the short entry; 0 for the root
	lfn    []int64 // byte offsets of its long-name slots
	length uint32  // clusters of the chain the entry owns
	cut    uint32  // cluster whose FAT entry becomes end-of-chain, or 0
	freed  uint32  // clusters freed behind cut
	state  nodeState
	open   bool // a directory being walked: an ancestor of what the walk meets
	why    *Finding
	dir    *dirSlots
}

// dirSlots is what the walk noted about a directory's slots besides its entries.
type dirSlots struct {
	orphans   []orphanRun
	zeros     []slotRef // slots marked 0x00
	lastFixed int32     // index of the last live slot that is no entry of ours (".", label)
	lastLive  int32     // index of the last live slot once the repair is done
}

type orphanRun struct {
	slots []int64
	name  string
}

// frame is a directory being read.
type frame struct {
	node     int32
	clusters []uint32
	next     int // index in clusters of the cluster to read next
	buf      []byte
	slot     int
	index    int32
	base     int64 // byte offset of the cluster in buf
	run      lfnRun
}

// checker walks the directory tree and decides which entry owns which cluster.
type checker struct {
	r     io.ReaderAt
	vol   *volume
	fat   *table
	opts  Options
	rep   *Report
	nodes []node
	// owner is, per cluster, 1 + the index of the node whose chain holds it, 0 for none
	// (so that a new slice needs no filling), or tailMark; ownerOf decodes it.
	owner []int32
	// seen has a bit set for every cluster in chain: loop detection in a bit per cluster,
	// cleared through chain before the next walk.
	seen  []uint64
	chain []uint32
	// budget bounds the clusters all chain walks together may visit.
	budget  int64
	maxDir  int
	rootCut uint32
	// free counts the clusters FAT 1 marks free, as read (planFAT).
	free uint32
}

func newChecker(r io.ReaderAt, vol *volume, fat *table, opts Options, rep *Report) *checker {
	n := int(vol.clusters) + 2
	return &checker{
		r: r, vol: vol, fat: fat, opts: opts, rep: rep,
		owner:  make([]int32, n),
		seen:   make([]uint64, (n+63)/64),
		budget: 16*int64(n) + 1<<20,
		maxDir: int(maxDirBytes / vol.clusterSize),
	}
}

// Cluster owners other than a node, as ownerOf returns them.
const (
	noOwner   = -1
	behindCut = tailMark - 1
)

// ownerOf is the index of the node that owns cluster cl, noOwner or behindCut.
func (c *checker) ownerOf(cl uint32) int32 { return c.owner[cl] - 1 }

// path is a node's path from the root, with long names.
func (c *checker) path(i int32) string {
	if i == 0 {
		return "/"
	}
	var parts []string
	for ; i > 0; i = c.nodes[i].parent {
		parts = append(parts, c.nodes[i].name)
	}
	var p string
	for j := len(parts) - 1; j >= 0; j-- {
		p += "/" + parts[j]
	}
	return p
}

func (c *checker) entry(i int32) Entry {
	n := &c.nodes[i]
	return Entry{
		Path: c.path(i), Name: n.name, ShortName: n.short.displayName(),
		Dir: n.short.isDir(), Size: n.short.size, Cluster: n.short.start,
		Modified: n.short.modified(),
	}
}

// chainResult is what follow found wrong with a chain, if anything.
type chainResult struct {
	problem Problem
	at      uint32
	detail  string
	cut     uint32 // the last cluster a file needs, when the chain goes on behind it
}

// follow walks a chain from start into c.chain. A file's walk stops after the clusters
// its size needs (need > 0): what follows is cut, whatever it is. A directory's walk goes
// to the end-of-chain mark (need == 0).
func (c *checker) follow(start uint32, need uint64) (chainResult, error) {
	for _, cl := range c.chain {
		c.seen[cl/64] &^= 1 << (cl % 64)
	}
	c.chain = c.chain[:0]
	last := uint32(0)
	for cl := start; ; {
		if !c.vol.valid(cl) {
			if last == 0 {
				return chainResult{problem: OutOfRange, at: cl, detail: fmt.Sprintf("start cluster %d outside 2..%d", cl, c.vol.clusters+1)}, nil
			}
			return chainResult{problem: OutOfRange, at: last, detail: fmt.Sprintf("cluster %d links to %#x, outside 2..%d", last, cl, c.vol.clusters+1)}, nil
		}
		if c.seen[cl/64]&(1<<(cl%64)) != 0 {
			return chainResult{problem: Loop, at: cl, detail: fmt.Sprintf("cluster %d links back to cluster %d", last, cl)}, nil
		}
		if c.budget--; c.budget < 0 {
			return chainResult{}, fmt.Errorf("chains walked too often (cluster %d): %w", cl, ErrLimit)
		}
		v := c.fat.entry(cl)
		switch v {
		case 0:
			return chainResult{problem: FreeCluster, at: cl, detail: fmt.Sprintf("cluster %d is free, %d clusters into the chain", cl, len(c.chain))}, nil
		case badEntry:
			return chainResult{problem: BadCluster, at: cl, detail: fmt.Sprintf("cluster %d is marked bad", cl)}, nil
		}
		c.chain = append(c.chain, cl)
		c.seen[cl/64] |= 1 << (cl % 64)
		last = cl
		if need > 0 && uint64(len(c.chain)) == need {
			if v < eocMin {
				return chainResult{cut: cl}, nil
			}
			return chainResult{}, nil
		}
		if need == 0 && len(c.chain) > c.maxDir {
			return chainResult{problem: DirTooLarge, at: cl, detail: fmt.Sprintf("more than %d clusters", c.maxDir)}, nil
		}
		if v >= eocMin {
			if need == 0 {
				return chainResult{}, nil
			}
			return chainResult{problem: ShortChain, at: cl, detail: fmt.Sprintf("ends at cluster %d after %d of %d clusters", cl, len(c.chain), need)}, nil
		}
		cl = v
	}
}

// walk reads the tree from the root, depth first.
func (c *checker) walk() error {
	root := node{parent: -1, short: shortEntry{attr: attrDir, start: c.vol.rootCluster}, dir: &dirSlots{lastFixed: -1}}
	c.nodes = append(c.nodes, root)
	chain, err := c.rootChain()
	if err != nil {
		return err
	}
	c.claim(0, chain)
	stack := []*frame{c.newFrame(0, chain)}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.slot*slotSize == len(f.buf) {
			if f.next == len(f.clusters) {
				c.finish(f)
				stack = stack[:len(stack)-1]
				continue
			}
			if err := c.load(f); err != nil {
				return err
			}
		}
		off := f.base + int64(f.slot*slotSize)
		s := f.buf[f.slot*slotSize : (f.slot+1)*slotSize]
		f.slot++
		f.index++
		child, err := c.slot(f, s, slotRef{off: off, index: f.index - 1})
		if err != nil {
			return err
		}
		if child >= 0 {
			if len(stack) >= maxDepth {
				return fmt.Errorf("%s (cluster %d): directories nested deeper than %d: %w", c.path(child), c.nodes[child].short.start, maxDepth, ErrLimit)
			}
			stack = append(stack, c.newFrame(child, append([]uint32(nil), c.chain...)))
		}
	}
	return nil
}

// rootChain follows the root directory's chain. A broken one is cut at its last good
// cluster (phase 2), as the root has no entry to delete.
func (c *checker) rootChain() ([]uint32, error) {
	res, err := c.follow(c.vol.rootCluster, 0)
	if err != nil {
		return nil, err
	}
	chain := append([]uint32(nil), c.chain...)
	if res.problem == 0 {
		return chain, nil
	}
	if len(chain) == 0 {
		if res.problem != FreeCluster {
			return nil, fmt.Errorf("root directory (cluster %d): %s: %w", c.vol.rootCluster, res.detail, ErrUnsupported)
		}
		chain = []uint32{c.vol.rootCluster}
	}
	if len(chain) > c.maxDir {
		chain = chain[:c.maxDir]
	}
	c.rootCut = chain[len(chain)-1]
	c.nodes[0].why = &Finding{Problem: RootChain, Path: "/", Cluster: res.at, Detail: res.detail + fmt.Sprintf("; ends at cluster %d", c.rootCut), Action: CutChain}
	return chain, nil
}

func (c *checker) newFrame(i int32, clusters []uint32) *frame {
	c.nodes[i].open = true
	return &frame{node: i, clusters: clusters, buf: make([]byte, 0, c.vol.clusterSize)}
}

func (c *checker) load(f *frame) error {
	cl := f.clusters[f.next]
	f.next++
	f.base = c.vol.clusterOffset(cl)
	f.buf = f.buf[:c.vol.clusterSize]
	f.slot = 0
	if _, err := c.r.ReadAt(f.buf, f.base); err != nil {
		return fmt.Errorf("read directory %s (cluster %d): %w", c.path(f.node), cl, err)
	}
	return nil
}

func (c *checker) finish(f *frame) {
	c.orphan(f)
	n := &c.nodes[f.node]
	n.open = false
	n.end = int32(len(c.nodes))
}

// orphan records the frame's pending long-name slots as orphaned.
func (c *checker) orphan(f *frame) {
	if !f.run.active() {
		return
	}
	offs := make([]int64, len(f.run.slots))
	for i, s := range f.run.slots {
		offs[i] = s.off
	}
	d := c.nodes[f.node].dir
	d.orphans = append(d.orphans, orphanRun{slots: offs, name: f.run.partial()})
	f.run = lfnRun{}
}

// slot handles one directory slot; it returns the node of a subdirectory to descend
// into, or -1.
func (c *checker) slot(f *frame, s []byte, ref slotRef) (int32, error) {
	d := c.nodes[f.node].dir
	switch {
	case s[0] == slotFree:
		c.orphan(f)
		d.zeros = append(d.zeros, ref)
		return -1, nil
	case s[0] == slotDeleted:
		c.orphan(f)
		return -1, nil
	case s[11] == attrLFN:
		c.longName(f, s, ref)
		return -1, nil
	}
	e := parseShort(s)
	if e.isDot() || e.attr&attrVolume != 0 {
		c.orphan(f)
		d.lastFixed = ref.index
		return -1, nil
	}
	name := f.run.name(e)
	var lfn []int64
	if name != "" {
		for _, s := range f.run.slots {
			lfn = append(lfn, s.off)
		}
		f.run = lfnRun{}
	} else {
		c.orphan(f)
		name = e.displayName()
	}
	if len(c.nodes) >= maxEntries {
		return -1, fmt.Errorf("%s/%s (cluster %d): more than %d entries: %w", c.path(f.node), name, e.start, maxEntries, ErrLimit)
	}
	i := int32(len(c.nodes))
	c.nodes = append(c.nodes, node{parent: f.node, index: ref.index, name: name, short: e, off: ref.off, lfn: lfn})
	if e.isDir() {
		c.rep.Dirs++
	} else {
		c.rep.Files++
	}
	if badShortName(e.name) {
		c.remove(i, BadName, e.start, fmt.Sprintf("%q", e.name[:]))
		return -1, nil
	}
	if e.isDir() {
		return c.checkDir(i)
	}
	return -1, c.checkFile(i)
}

// longName adds a long-name slot to the frame's run, orphaning what does not fit.
func (c *checker) longName(f *frame, s []byte, ref slotRef) {
	if s[0]&lfnLast != 0 {
		c.orphan(f)
		if !f.run.start(s, ref) {
			f.run = lfnRun{slots: []slotRef{ref}}
			c.orphan(f)
		}
		return
	}
	if f.run.active() && f.run.add(s, ref) {
		return
	}
	c.orphan(f)
	f.run = lfnRun{slots: []slotRef{ref}}
	c.orphan(f)
}

func (c *checker) checkFile(i int32) error {
	n := &c.nodes[i]
	size := n.short.size
	if size == 0 {
		// An empty file owns no cluster; one that names a start cluster gets it cleared
		// (phase 1) and the cluster freed (phase 2).
		return nil
	}
	if n.short.start == 0 {
		c.remove(i, ShortChain, 0, fmt.Sprintf("%d bytes but no cluster", size))
		return nil
	}
	need := (uint64(size) + uint64(c.vol.clusterSize) - 1) / uint64(c.vol.clusterSize)
	res, err := c.follow(n.short.start, need)
	if err != nil {
		return err
	}
	if res.problem != 0 {
		c.remove(i, res.problem, res.at, fmt.Sprintf("%s; size %d bytes", res.detail, size))
		return nil
	}
	if c.settle(i) {
		c.nodes[i].cut = res.cut
	}
	return nil
}

func (c *checker) checkDir(i int32) (int32, error) {
	n := &c.nodes[i]
	if n.short.start == 0 {
		c.remove(i, ShortChain, 0, "directory without a cluster")
		return -1, nil
	}
	res, err := c.follow(n.short.start, 0)
	if err != nil {
		return -1, err
	}
	if res.problem != 0 {
		c.remove(i, res.problem, res.at, res.detail)
		return -1, nil
	}
	if !c.settle(i) {
		return -1, nil
	}
	c.nodes[i].dir = &dirSlots{lastFixed: -1}
	return i, nil
}

// settle resolves the cross-links of node i's chain (in c.chain) with the chains claimed
// before and claims it if i keeps it. It reports whether i does.
func (c *checker) settle(i int32) bool {
	var owners []int32
	var shared map[int32]uint32 // the first cluster shared with each owner
	for _, cl := range c.chain {
		if o := c.ownerOf(cl); o >= 0 {
			if shared == nil {
				shared = map[int32]uint32{}
			}
			if _, ok := shared[o]; !ok {
				shared[o] = cl
				owners = append(owners, o)
			}
		}
	}
	for _, o := range owners {
		if o == 0 || c.nodes[o].open || !c.loses(o, i) {
			c.remove(i, CrossLink, shared[o], fmt.Sprintf("cluster %d is also %s's", shared[o], c.path(o)))
			return false
		}
	}
	for _, o := range owners {
		c.drop(o, shared[o], fmt.Sprintf("cluster %d is also %s's", shared[o], c.path(i)))
	}
	c.claim(i, c.chain)
	return true
}

func (c *checker) loses(first, later int32) bool {
	loser := c.opts.Loser
	if loser == nil {
		loser = DefaultLoser
	}
	return loser(c.entry(first), c.entry(later))
}

func (c *checker) claim(i int32, chain []uint32) {
	for _, cl := range chain {
		c.owner[cl] = i + 1
	}
	c.nodes[i].length = uint32(len(chain))
}

// remove marks a node the walk just met as deleted; it owns no cluster.
func (c *checker) remove(i int32, p Problem, cl uint32, detail string) {
	c.nodes[i].state = deleted
	c.nodes[i].why = &Finding{Problem: p, Path: c.path(i), Cluster: cl, Detail: detail, Action: DeleteEntry}
}

// drop deletes a node that lost a cross-link after it had claimed its chain, and with a
// directory everything below it: their clusters become free unless the winner owns them.
func (c *checker) drop(o int32, cl uint32, detail string) {
	n := &c.nodes[o]
	below := 0
	if n.short.isDir() && n.state == kept {
		for j := o + 1; j < n.end; j++ {
			c.release(j)
			c.nodes[j].state = gone
			below++
		}
	}
	c.release(o)
	if below > 0 {
		detail += fmt.Sprintf("; %d entries below it go with it", below)
	}
	c.remove(o, CrossLink, cl, detail)
}

// release gives up the clusters a node claimed.
func (c *checker) release(i int32) {
	n := &c.nodes[i]
	if n.state != kept {
		return
	}
	cl := n.short.start
	for k := uint32(0); k < n.length; k++ {
		if c.ownerOf(cl) == i {
			c.owner[cl] = 0
		}
		cl = c.fat.entry(cl)
	}
	n.length = 0
}
