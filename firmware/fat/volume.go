package fat

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Boot sector (BIOS parameter block) fields of a FAT32 volume, by byte offset.
const (
	bpbBytesPerSector = 11
	bpbSectorsPerClus = 13
	bpbReserved       = 14
	bpbNumFATs        = 16
	bpbRootEntries    = 17
	bpbTotalSectors16 = 19
	bpbMedia          = 21
	bpbFATSize16      = 22
	bpbTotalSectors32 = 32
	bpbFATSize32      = 36
	bpbVersion        = 42
	bpbRootCluster    = 44
	bpbFSInfo         = 48
	// bpbState is the byte Linux calls "state" (FAT32 BPB offset 0x41): bit 0 is set while
	// the volume is mounted and cleared on a clean unmount.
	bpbState     = 0x41
	stateDirty   = 0x01
	bootSigOff   = 510
	minSector    = 512
	maxSector    = 4096
	maxClusterSz = 64 << 10
)

// FSInfo sector fields.
const (
	fsiLeadSig   = 0
	fsiStrucSig  = 484
	fsiFreeCount = 488
	fsiNextFree  = 492
	fsiTrailSig  = 508

	fsiLeadMagic  = 0x41615252
	fsiStrucMagic = 0x61417272
	fsiTrailMagic = 0xAA550000
	// fsiUnknown is "not known" for both the free count and the next-free hint.
	fsiUnknown = 0xFFFFFFFF
)

// maxClusters bounds the memory a volume can make Repair use (about 16 bytes a cluster):
// an ESP has a few hundred thousand clusters, and a larger count read from a garbage boot
// sector must not exhaust PID 1's memory.
const maxClusters = 1 << 22

// volume is the geometry a boot sector describes, checked against the device.
type volume struct {
	sectorSize  int64
	clusterSize int64
	fatStart    int64 // byte offset of FAT 1
	fatSize     int64 // bytes in one FAT copy
	numFATs     int
	dataStart   int64 // byte offset of cluster 2
	clusters    uint32
	rootCluster uint32
	// fsInfo is the FSInfo sector's byte offset, or 0 when the volume has none or Repair
	// must leave it alone (fsInfoProblem says why).
	fsInfo        int64
	fsInfoProblem string
	boot          []byte
}

// readVolume reads and checks the boot sector. Any field it does not understand is an
// error wrapping ErrUnsupported, so that nothing is ever written to a disk whose layout
// was guessed.
func readVolume(r io.ReaderAt, size int64) (*volume, error) {
	if size < minSector {
		return nil, fmt.Errorf("device of %d bytes: %w", size, ErrUnsupported)
	}
	head := make([]byte, minSector)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("read boot sector: %w", err)
	}
	le16 := func(off int) int64 { return int64(binary.LittleEndian.Uint16(head[off:])) }
	le32 := func(off int) int64 { return int64(binary.LittleEndian.Uint32(head[off:])) }
	bad := func(format string, args ...any) error {
		return fmt.Errorf("boot sector: "+format+": %w", append(args, ErrUnsupported)...)
	}
	if head[bootSigOff] != 0x55 || head[bootSigOff+1] != 0xAA {
		return nil, bad("no 0x55AA signature")
	}
	v := &volume{sectorSize: le16(bpbBytesPerSector)}
	if v.sectorSize < minSector || v.sectorSize > maxSector || v.sectorSize&(v.sectorSize-1) != 0 {
		return nil, bad("%d bytes per sector", v.sectorSize)
	}
	spc := int64(head[bpbSectorsPerClus])
	if spc == 0 || spc&(spc-1) != 0 || spc*v.sectorSize > maxClusterSz {
		return nil, bad("%d sectors per cluster", spc)
	}
	v.clusterSize = spc * v.sectorSize
	reserved := le16(bpbReserved)
	if reserved < 1 {
		return nil, bad("no reserved sectors")
	}
	v.numFATs = int(head[bpbNumFATs])
	if v.numFATs != 1 && v.numFATs != 2 {
		return nil, bad("%d FATs", v.numFATs)
	}
	if m := head[bpbMedia]; m != 0xF0 && m < 0xF8 {
		return nil, bad("media byte %#x", m)
	}
	if le16(bpbFATSize16) != 0 || le16(bpbRootEntries) != 0 {
		return nil, bad("FAT12/16 layout (FAT size %d, %d root entries), not FAT32", le16(bpbFATSize16), le16(bpbRootEntries))
	}
	fatSectors := le32(bpbFATSize32)
	if fatSectors == 0 {
		return nil, bad("FAT size 0")
	}
	if ver := le16(bpbVersion); ver != 0 {
		return nil, bad("FAT32 version %#x", ver)
	}
	total := le16(bpbTotalSectors16)
	if total == 0 {
		total = le32(bpbTotalSectors32)
	}
	if total*v.sectorSize > size {
		return nil, bad("volume of %d sectors is larger than the device (%d bytes)", total, size)
	}
	v.fatStart = reserved * v.sectorSize
	v.fatSize = fatSectors * v.sectorSize
	dataSector := reserved + int64(v.numFATs)*fatSectors
	if dataSector >= total {
		return nil, bad("FATs end at sector %d, beyond the volume's %d", dataSector, total)
	}
	v.dataStart = dataSector * v.sectorSize
	count := (total - dataSector) / spc
	if count < 1 || count > maxClusters {
		return nil, bad("%d clusters (at most %d handled)", count, maxClusters)
	}
	if fatSectors*v.sectorSize/4 < count+2 {
		return nil, bad("FAT of %d sectors too small for %d clusters", fatSectors, count)
	}
	v.clusters = uint32(count)
	v.rootCluster = uint32(le32(bpbRootCluster))
	if v.rootCluster < 2 || v.rootCluster >= v.clusters+2 {
		return nil, bad("root cluster %d outside 2..%d", v.rootCluster, v.clusters+1)
	}
	v.boot = make([]byte, v.sectorSize)
	if _, err := r.ReadAt(v.boot, 0); err != nil {
		return nil, fmt.Errorf("read boot sector: %w", err)
	}
	if err := v.readFSInfo(r, le16(bpbFSInfo), reserved); err != nil {
		return nil, err
	}
	return v, nil
}

// readFSInfo finds the FSInfo sector. A volume may have none (sector number 0 or 0xFFFF);
// one whose number or signatures are wrong is left alone: FSInfo is only a hint to the
// driver, and writing a sector that does not look like one could destroy something else.
func (v *volume) readFSInfo(r io.ReaderAt, sector, reserved int64) error {
	if sector == 0 || sector == 0xFFFF {
		return nil
	}
	if sector >= reserved {
		v.fsInfoProblem = fmt.Sprintf("sector %d is not a reserved sector", sector)
		return nil
	}
	buf := make([]byte, v.sectorSize)
	if _, err := r.ReadAt(buf, sector*v.sectorSize); err != nil {
		return fmt.Errorf("read FSInfo sector: %w", err)
	}
	le32 := func(off int) uint32 { return binary.LittleEndian.Uint32(buf[off:]) }
	if le32(fsiLeadSig) != fsiLeadMagic || le32(fsiStrucSig) != fsiStrucMagic || le32(fsiTrailSig) != fsiTrailMagic {
		v.fsInfoProblem = fmt.Sprintf("sector %d has wrong signatures", sector)
		return nil
	}
	v.fsInfo = sector * v.sectorSize
	return nil
}

// clusterOffset is the byte offset of a data cluster.
func (v *volume) clusterOffset(c uint32) int64 {
	return v.dataStart + int64(c-2)*v.clusterSize
}

// valid reports whether c numbers a data cluster.
func (v *volume) valid(c uint32) bool { return c >= 2 && c < v.clusters+2 }
