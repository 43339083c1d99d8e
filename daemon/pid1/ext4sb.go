package pid1

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"
)

// The data partition's superblock after a power cut. ext4 journals its metadata, but the
// kernel writes the superblock in place (at mount, at every commit of its counters), and a
// cut that tears that 1 KiB write at a sector boundary leaves half an old and half a new
// superblock whose checksum matches neither: the kernel then refuses to mount the file
// system ("bad message"), and e2fsck -p refuses it too (it wants e2fsck -b with a backup).
// The halves are each a superblock the kernel wrote, so PID 1 checks the primary against
// the backup in group 1 (the fields that describe the file system's shape and identity
// must agree) and writes the checksum again; a primary that does not agree is replaced by
// the backup. The kernel then replays the journal as after any cut.

// Offsets in an ext4 superblock (struct ext4_super_block).
const (
	sbSize            = 1024
	sbFirstDataBlock  = 0x14 // __le32 s_first_data_block
	sbLogBlockSize    = 0x18 // __le32 s_log_block_size: block size 1024 << it
	sbBlocksPerGroup  = 0x20 // __le32 s_blocks_per_group
	sbBlockGroupNr    = 0x5A // __le16 s_block_group_nr: the group a backup is in
	sbFeatureROCompat = 0x64 // __le32 s_feature_ro_compat
	sbChecksumType    = 0x175
	sbChecksum        = 0x3FC // __le32 s_checksum, crc32c of everything before it

	sbFeatureCompat   = 0x5C // __le32 s_feature_compat
	sbFeatureIncompat = 0x60 // __le32 s_feature_incompat

	compatHasJournal      = 0x4
	incompatRecover       = 0x4 // the journal needs replaying: set while mounted
	roCompatMetadataCsum  = 0x400
	roCompatOrphanPresent = 0x10000 // set while the orphan file has entries
	checksumCRC32C        = 1
)

// sbFeatures are the incompat and ro_compat features without the bits the kernel sets and
// clears in the primary alone while the file system is in use.
func sbFeatures(sb []byte) (incompat, roCompat uint32) {
	return binary.LittleEndian.Uint32(sb[sbFeatureIncompat:]) &^ incompatRecover,
		binary.LittleEndian.Uint32(sb[sbFeatureROCompat:]) &^ roCompatOrphanPresent
}

// sbShape are the byte ranges of the fields that say what the file system is, not how full
// it is: a primary and its backup agree on them. Counters, times and the orphan list may
// differ (the kernel updates only the primary).
var sbShape = [][2]int{
	{0x00, 0x08},   // s_inodes_count, s_blocks_count_lo
	{0x14, 0x2C},   // first data block, block and cluster sizes, blocks/clusters/inodes per group
	{0x38, 0x3A},   // s_magic
	{0x4C, 0x50},   // s_rev_level
	{0x54, 0x5A},   // s_first_ino, s_inode_size
	{0x5C, 0x60},   // s_feature_compat
	{0x68, 0x78},   // s_uuid
	{0x150, 0x154}, // s_blocks_count_hi
	{0x175, 0x176}, // s_checksum_type
	{0x270, 0x274}, // s_checksum_seed
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ext4Checksum is a superblock's checksum as ext4 computes it: crc32c seeded with ~0,
// without the final inversion.
func ext4Checksum(sb []byte) uint32 { return ^crc32.Checksum(sb[:sbChecksum], castagnoli) }

// Ext4SuperblockDevice is what RepairExt4Superblock reads and writes: a block device or an
// image file.
type Ext4SuperblockDevice interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// RepairExt4Superblock checks the primary superblock of the ext4 file system on dev and
// repairs a checksum a torn write broke. It returns what it did, "" when nothing was
// needed (a sound superblock, or no ext4 with checksums at all), and an error when the
// superblock is damaged beyond that.
func RepairExt4Superblock(dev Ext4SuperblockDevice) (string, error) {
	sb := make([]byte, sbSize)
	if _, err := dev.ReadAt(sb, ext4SuperblockOffset); err != nil {
		return "", fmt.Errorf("reading the superblock: %w", err)
	}
	if binary.LittleEndian.Uint16(sb[ext4MagicOffset:]) != ext4Magic ||
		binary.LittleEndian.Uint32(sb[sbFeatureROCompat:])&roCompatMetadataCsum == 0 || sb[sbChecksumType] != checksumCRC32C {
		return "", nil
	}
	stored := binary.LittleEndian.Uint32(sb[sbChecksum:])
	if stored == ext4Checksum(sb) {
		return "", nil
	}
	backup, at, err := readBackupSuperblock(dev, sb)
	if err != nil {
		return "", fmt.Errorf("superblock checksum %08x, want %08x, and no sound backup: %w", stored, ext4Checksum(sb), err)
	}
	what := "superblock checksum written again (a torn write)"
	if off := sbDisagree(sb, backup); off >= 0 {
		// Not two halves of the same file system's superblock: the backup replaces it, and
		// the journal is replayed at the mount (a clean one replays nothing), since the
		// backup does not say whether it needs that.
		sb = backup
		binary.LittleEndian.PutUint16(sb[sbBlockGroupNr:], 0)
		if binary.LittleEndian.Uint32(sb[sbFeatureCompat:])&compatHasJournal != 0 {
			binary.LittleEndian.PutUint32(sb[sbFeatureIncompat:], binary.LittleEndian.Uint32(sb[sbFeatureIncompat:])|incompatRecover)
		}
		what = fmt.Sprintf("superblock replaced by the backup at byte %d (it disagreed at offset %#x)", at, off)
	}
	binary.LittleEndian.PutUint32(sb[sbChecksum:], ext4Checksum(sb))
	if _, err := dev.WriteAt(sb, ext4SuperblockOffset); err != nil {
		return "", fmt.Errorf("writing the superblock: %w", err)
	}
	if err := dev.Sync(); err != nil {
		return "", fmt.Errorf("writing the superblock: %w", err)
	}
	return what, nil
}

// sbDisagree returns the offset of the first field describing the file system on which a
// primary and a backup superblock disagree, -1 when they agree.
func sbDisagree(primary, backup []byte) int {
	for _, r := range sbShape {
		if !bytes.Equal(primary[r[0]:r[1]], backup[r[0]:r[1]]) {
			return r[0]
		}
	}
	pi, pr := sbFeatures(primary)
	bi, br := sbFeatures(backup)
	switch {
	case pi != bi:
		return sbFeatureIncompat
	case pr != br:
		return sbFeatureROCompat
	}
	return -1
}

// readBackupSuperblock reads the backup superblock of group 1, where every ext4 keeps one
// (sparse_super), placed by the primary's geometry, and checks its own checksum.
func readBackupSuperblock(dev io.ReaderAt, primary []byte) ([]byte, int64, error) {
	logSize := binary.LittleEndian.Uint32(primary[sbLogBlockSize:])
	perGroup := binary.LittleEndian.Uint32(primary[sbBlocksPerGroup:])
	first := binary.LittleEndian.Uint32(primary[sbFirstDataBlock:])
	if logSize > 6 || perGroup == 0 {
		return nil, 0, fmt.Errorf("the primary's geometry is not ext4's (log block size %d, %d blocks per group)", logSize, perGroup)
	}
	at := (int64(first) + int64(perGroup)) * (1024 << logSize)
	b := make([]byte, sbSize)
	if _, err := dev.ReadAt(b, at); err != nil {
		return nil, at, fmt.Errorf("reading the backup at byte %d: %w", at, err)
	}
	switch {
	case binary.LittleEndian.Uint16(b[ext4MagicOffset:]) != ext4Magic:
		return nil, at, fmt.Errorf("no superblock at byte %d", at)
	case binary.LittleEndian.Uint32(b[sbChecksum:]) != ext4Checksum(b):
		return nil, at, fmt.Errorf("the backup at byte %d fails its checksum too", at)
	case binary.LittleEndian.Uint16(b[sbBlockGroupNr:]) != 1:
		return nil, at, fmt.Errorf("the superblock at byte %d is not group 1's", at)
	}
	return b, at, nil
}

// repairData checks the data partition's superblock on node, not yet mounted, and repairs
// what a torn write left (RepairExt4Superblock). A partition it cannot check is mounted as
// it is, and the mount says what is wrong.
func (m *Machine) repairData(node string) {
	start := time.Now()
	// O_EXCL on a block device: refused while it is mounted.
	f, err := os.OpenFile(m.path(node), os.O_RDWR|os.O_EXCL, 0)
	if err != nil {
		m.log.Error("checking the data partition's superblock failed; mounting it as it is", "dev", node, "err", err)
		return
	}
	defer f.Close()
	what, err := RepairExt4Superblock(f)
	if err != nil {
		m.log.Error("the data partition's superblock is damaged; mounting it as it is", "dev", node, "err", err)
		return
	}
	if what == "" {
		return
	}
	m.console.marker("EDGEGATE-DATA-REPAIRED %s", node)
	m.log.Warn("data partition repaired", "dev", node, "what", what, "took", since(start))
}
