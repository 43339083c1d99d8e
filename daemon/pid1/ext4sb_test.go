package pid1

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/internal/prereq"
)

// e2fsTool finds an e2fsprogs program, which lives in /usr/sbin (not on every PATH).
func e2fsTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/" + name, "/sbin/" + name} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	prereq.Missing(t, "%s (Debian e2fsprogs) is not installed", name)
	return ""
}

// mkext4 makes an ext4 file system image as the image builder does, with blockSize-byte
// blocks, and returns it with its primary superblock.
func mkext4(t *testing.T, blockSize, size string) (string, []byte) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "data.img")
	if out, err := exec.Command(e2fsTool(t, "mke2fs"), "-q", "-F", "-t", "ext4", "-b", blockSize, "-L", "edgegate-data", img, size).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	return img, readSB(t, img)
}

func readSB(t *testing.T, img string) []byte {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb := make([]byte, sbSize)
	if _, err := f.ReadAt(sb, ext4SuperblockOffset); err != nil {
		t.Fatal(err)
	}
	return sb
}

func writeSB(t *testing.T, img string, sb []byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(sb, ext4SuperblockOffset); err != nil {
		t.Fatal(err)
	}
}

func repairImage(t *testing.T, img string) (string, error) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return RepairExt4Superblock(f)
}

// fsckClean runs e2fsck -fp as a boot would (it replays the journal a superblock marks
// as needing it, exit 0 or 1), then e2fsck -fn, which must find nothing wrong.
func fsckClean(t *testing.T, img string) {
	t.Helper()
	out, err := exec.Command(e2fsTool(t, "e2fsck"), "-fp", img).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Errorf("e2fsck -fp after the repair: %v\n%s", err, out)
	}
	if out, err := exec.Command(e2fsTool(t, "e2fsck"), "-fn", img).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn after the repair: %v\n%s", err, out)
	}
}

// newer is the superblock as the kernel writes it later: another write time and free
// block count and, while mounted, the journal marked as needing recovery; checksummed.
func newer(old []byte, mounted bool) []byte {
	sb := bytes.Clone(old)
	if mounted {
		binary.LittleEndian.PutUint32(sb[sbFeatureIncompat:], binary.LittleEndian.Uint32(sb[sbFeatureIncompat:])|incompatRecover)
	}
	binary.LittleEndian.PutUint32(sb[0x30:], binary.LittleEndian.Uint32(sb[0x30:])+3600) // s_wtime
	binary.LittleEndian.PutUint32(sb[0x0C:], binary.LittleEndian.Uint32(sb[0x0C:])-7)    // s_free_blocks_count_lo
	binary.LittleEndian.PutUint32(sb[sbChecksum:], ext4Checksum(sb))
	return sb
}

// TestRepairTornSuperblock: a cut tore the kernel's superblock write at the sector
// boundary, either way round. The checksum is written again over the halves, and e2fsck
// (which refuses the torn one) finds the file system clean.
func TestRepairTornSuperblock(t *testing.T) {
	for _, tc := range []struct{ blockSize, size string }{{"1024", "64M"}, {"4096", "256M"}} {
		for _, v := range []struct{ newFirst, mounted bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
			newFirst := v.newFirst
			img, old := mkext4(t, tc.blockSize, tc.size)
			if binary.LittleEndian.Uint32(old[sbChecksum:]) != ext4Checksum(old) {
				t.Fatalf("mke2fs's superblock fails ext4Checksum: the checksum is computed wrongly")
			}
			nw := newer(old, v.mounted)
			torn := append(bytes.Clone(old[:512]), nw[512:]...)
			if newFirst {
				torn = append(bytes.Clone(nw[:512]), old[512:]...)
			}
			writeSB(t, img, torn)
			if out, err := exec.Command(e2fsTool(t, "e2fsck"), "-fn", img).CombinedOutput(); err == nil {
				t.Fatalf("e2fsck accepts the torn superblock; the test tears nothing:\n%s", out)
			}
			what, err := repairImage(t, img)
			if err != nil || !strings.Contains(what, "checksum written again") {
				t.Fatalf("%s-byte blocks, %+v: %q, %v", tc.blockSize, v, what, err)
			}
			got := readSB(t, img)
			if !bytes.Equal(got[:sbChecksum], torn[:sbChecksum]) || binary.LittleEndian.Uint32(got[sbChecksum:]) != ext4Checksum(got) {
				t.Errorf("%s-byte blocks: the repair changed more than the checksum", tc.blockSize)
			}
			fsckClean(t, img)
			if what, err := repairImage(t, img); what != "" || err != nil {
				t.Errorf("a second check: %q, %v; want nothing to do", what, err)
			}
		}
	}
}

// TestRepairSuperblockFromBackup: a primary that disagrees with the backup on the file
// system's shape is replaced by the backup.
func TestRepairSuperblockFromBackup(t *testing.T) {
	img, old := mkext4(t, "1024", "64M")
	bad := bytes.Clone(old)
	binary.LittleEndian.PutUint32(bad[0x00:], 12345) // s_inodes_count
	writeSB(t, img, bad)
	what, err := repairImage(t, img)
	if err != nil || !strings.Contains(what, "replaced by the backup at byte 8389632") {
		t.Fatalf("RepairExt4Superblock: %q, %v", what, err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	backup, _, err := readBackupSuperblock(f, old)
	if err != nil {
		t.Fatal(err)
	}
	got := readSB(t, img)
	if binary.LittleEndian.Uint32(got[sbFeatureIncompat:])&incompatRecover == 0 {
		t.Error("the superblock from the backup does not ask for the journal to be replayed")
	}
	binary.LittleEndian.PutUint32(got[sbFeatureIncompat:], binary.LittleEndian.Uint32(got[sbFeatureIncompat:])&^incompatRecover)
	for _, r := range sbShape {
		if !bytes.Equal(got[r[0]:r[1]], old[r[0]:r[1]]) {
			t.Errorf("offset %#x: the repaired superblock says % x, mke2fs's % x", r[0], got[r[0]:r[1]], old[r[0]:r[1]])
		}
	}
	if !bytes.Equal(got[:sbBlockGroupNr], backup[:sbBlockGroupNr]) || !bytes.Equal(got[sbBlockGroupNr+2:sbChecksum], backup[sbBlockGroupNr+2:sbChecksum]) ||
		binary.LittleEndian.Uint16(got[sbBlockGroupNr:]) != 0 {
		t.Error("the repaired superblock is not the backup with group 0")
	}
	fsckClean(t, img)
}

// TestRepairSuperblockLeavesOthersAlone: a sound superblock, one without checksums and a
// file that is no ext4 are not written; a torn superblock without a backup is reported.
func TestRepairSuperblockLeavesOthersAlone(t *testing.T) {
	img, old := mkext4(t, "1024", "64M")
	if what, err := repairImage(t, img); what != "" || err != nil {
		t.Errorf("sound: %q, %v", what, err)
	}
	if got := readSB(t, img); !bytes.Equal(got, old) {
		t.Error("a sound superblock was written")
	}

	ext2 := filepath.Join(t.TempDir(), "ext2.img")
	if out, err := exec.Command(e2fsTool(t, "mke2fs"), "-q", "-F", "-t", "ext2", ext2, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	if what, err := repairImage(t, ext2); what != "" || err != nil {
		t.Errorf("ext2: %q, %v", what, err)
	}

	zeros := filepath.Join(t.TempDir(), "zeros")
	if err := os.WriteFile(zeros, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if what, err := repairImage(t, zeros); what != "" || err != nil {
		t.Errorf("zeros: %q, %v", what, err)
	}

	// 4 KiB blocks and 16 MiB: one block group, so no backup to check the halves against.
	small, old := mkext4(t, "4096", "16M")
	writeSB(t, small, append(bytes.Clone(newer(old, true)[:512]), old[512:]...))
	if what, err := repairImage(t, small); err == nil || !strings.Contains(err.Error(), "no sound backup") {
		t.Errorf("torn without a backup: %q, %v; want an error", what, err)
	}
}
