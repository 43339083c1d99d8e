package fat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Problem is what a finding found wrong.
type Problem int

// The problems Repair finds. The first ones are about one directory entry's cluster chain,
// the later ones about the volume.
const (
	// FreeCluster: the chain runs into a cluster the FAT marks free (the directory entry
	// became durable, the FAT chain did not).
	FreeCluster Problem = iota + 1
	// BadCluster: the chain runs into a cluster marked bad.
	BadCluster
	// OutOfRange: a start cluster or a link points outside the data area, or holds a
	// reserved value.
	OutOfRange
	// Loop: the chain comes back to a cluster it already passed.
	Loop
	// ShortChain: the chain ends before the file's size, or a directory has no cluster.
	ShortChain
	// LongChain: the chain is valid but longer than the file's size needs.
	LongChain
	// CrossLink: the entry's chain shares clusters with an entry met earlier.
	CrossLink
	// DirTooLarge: a directory's chain is longer than FAT's 65536 entries allow.
	DirTooLarge
	// BadName: a short entry whose name no FAT implementation writes: garbage.
	BadName
	// OrphanLFN: long-name slots not followed by their short entry, or with a wrong
	// checksum.
	OrphanLFN
	// EndMarker: free slots marked "end of directory" (0x00) before live entries, which
	// Linux and fsck.fat read past but UEFI firmware and mtools do not.
	EndMarker
	// RootChain: the root directory's chain is broken.
	RootChain
	// LostClusters: clusters allocated in the FAT that no entry uses.
	LostClusters
	// FATMismatch: a FAT copy differs from FAT 1.
	FATMismatch
	// FreeCount: FSInfo's count of free clusters (or its next-free hint) is wrong.
	FreeCount
	// Dirty: the volume is marked as not cleanly unmounted.
	Dirty
	// FSInfoInvalid: the FSInfo sector is unusable; Repair leaves it alone.
	FSInfoInvalid
)

var problemNames = map[Problem]string{
	FreeCluster:   "free cluster in chain",
	BadCluster:    "bad cluster in chain",
	OutOfRange:    "cluster out of range",
	Loop:          "chain loops",
	ShortChain:    "chain too short",
	LongChain:     "chain too long",
	CrossLink:     "cross-linked",
	DirTooLarge:   "directory too large",
	BadName:       "bad short name",
	OrphanLFN:     "orphaned long name",
	EndMarker:     "early end of directory",
	RootChain:     "root directory chain broken",
	LostClusters:  "lost clusters",
	FATMismatch:   "FAT copies differ",
	FreeCount:     "free count wrong",
	Dirty:         "dirty",
	FSInfoInvalid: "FSInfo invalid",
}

func (p Problem) String() string {
	if s, ok := problemNames[p]; ok {
		return s
	}
	return fmt.Sprintf("problem %d", int(p))
}

// Action is what Repair did about a finding (or would do, under DryRun).
type Action int

// The actions, each the smallest change that makes the volume consistent again.
const (
	// LeaveAlone: nothing is written for this finding.
	LeaveAlone Action = iota
	// DeleteEntry: the short entry and its long-name slots are marked deleted; the FAT is
	// not touched for it, as its clusters may be another entry's.
	DeleteEntry
	// ClearStart: an empty file's start cluster is set to 0.
	ClearStart
	// CutChain: an end-of-chain mark is written where the chain must end and the rest is
	// freed.
	CutChain
	// FreeClusters: the clusters are marked free.
	FreeClusters
	// DeleteSlots: directory slots are marked deleted (0xE5).
	DeleteSlots
	// CopyFAT: FAT 1, repaired, is written over the other copy.
	CopyFAT
	// SetFreeCount: FSInfo's free count is set to the true count, its hint to "unknown".
	SetFreeCount
	// MarkClean: the dirty flags are cleared.
	MarkClean
)

var actionNames = map[Action][2]string{
	LeaveAlone:   {"left alone", "would leave alone"},
	DeleteEntry:  {"entry deleted", "would delete entry"},
	ClearStart:   {"start cluster cleared", "would clear start cluster"},
	CutChain:     {"chain cut", "would cut chain"},
	FreeClusters: {"clusters freed", "would free clusters"},
	DeleteSlots:  {"slots deleted", "would delete slots"},
	CopyFAT:      {"FAT 1 copied over it", "would copy FAT 1 over it"},
	SetFreeCount: {"free count set", "would set free count"},
	MarkClean:    {"marked clean", "would mark clean"},
}

// text is the action as done, or as planned under a dry run.
func (a Action) text(dryRun bool) string {
	n, ok := actionNames[a]
	if !ok {
		return fmt.Sprintf("action %d", int(a))
	}
	if dryRun {
		return n[1]
	}
	return n[0]
}

func (a Action) String() string { return a.text(false) }

// Finding is one thing Repair found wrong and what it did about it.
type Finding struct {
	Problem Problem
	// Path is the entry's path from the root with long names ("/EFI/edgegate/a/vmlinuz"),
	// the directory's for slots, or "" for a finding about the whole volume.
	Path string
	// Cluster is the cluster at fault (the free one, the shared one, the first lost one),
	// or 0.
	Cluster uint32
	// Detail says what is wrong, in words.
	Detail string
	Action Action
	// DryRun is set when Action was only planned.
	DryRun bool
}

// String is the finding as one log line: path, what is wrong, what was done. A path
// with characters that do not print (garbage read as a name) is quoted.
func (f Finding) String() string {
	var b strings.Builder
	if f.Path != "" {
		if strings.IndexFunc(f.Path, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			b.WriteString(strconv.Quote(f.Path))
		} else {
			b.WriteString(f.Path)
		}
		b.WriteString(": ")
	}
	b.WriteString(f.Problem.String())
	if f.Detail != "" {
		b.WriteString(" (")
		b.WriteString(f.Detail)
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(f.Action.text(f.DryRun))
	return b.String()
}

// Report is what Repair found and did.
type Report struct {
	Findings []Finding
	// Files and Dirs count the entries the walk met (deleted ones included), not the root.
	Files, Dirs int
	// Clusters is the number of data clusters; Free how many are free after the repair
	// (planned, under DryRun).
	Clusters, Free uint32
	// Freed counts the clusters the repair freed: lost ones and the tails of over-long
	// chains.
	Freed uint32
	// Deleted counts the directory entries marked deleted.
	Deleted int
	// SectorsWritten counts the sector writes, or under DryRun the ones Repair would do.
	SectorsWritten int
	DryRun         bool
}

// Clean reports whether nothing was found.
func (r Report) Clean() bool { return len(r.Findings) == 0 }

// String is a one-line summary of the report, for the log line after the findings.
func (r Report) String() string {
	verb := "written"
	if r.DryRun {
		verb = "to write (dry run)"
	}
	return fmt.Sprintf("%d files, %d directories, %d/%d clusters used: %d findings, %d entries deleted, %d clusters freed, %d sectors %s",
		r.Files, r.Dirs, r.Clusters-r.Free, r.Clusters, len(r.Findings), r.Deleted, r.Freed, r.SectorsWritten, verb)
}

func (r *Report) add(f Finding) {
	f.DryRun = r.DryRun
	r.Findings = append(r.Findings, f)
}
