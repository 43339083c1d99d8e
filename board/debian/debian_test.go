package debian

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A record as `apt-cache show --no-all-versions linux-image-cloud-amd64:amd64` prints it.
const cloudMeta = `Package: linux-image-cloud-amd64
Source: linux-signed-amd64 (6.1.192+2)
Version: 6.1.192-2
Architecture: amd64
Provides: linux-latest-modules-6.1.0-56-cloud-amd64, wireguard-modules (= 1.0.0)
Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)
Description: Linux for x86-64 cloud (meta-package)

`

func TestParseMetapackage(t *testing.T) {
	tests := []struct {
		name, record, pkg, version string
		wantErr                    bool
	}{
		{name: "cloud", record: cloudMeta, pkg: "linux-image-6.1.0-56-cloud-amd64", version: "6.1.192-2"},
		{
			name:    "other dependencies first",
			record:  "Package: m\nDepends: initramfs-tools | linux-initramfs-tool, linux-image-6.1.0-9-arm64 (= 6.1.27-1)\n",
			pkg:     "linux-image-6.1.0-9-arm64",
			version: "6.1.27-1",
		},
		{name: "unpinned", record: "Depends: linux-image-6.1.0-9-arm64 (>= 6.1)\n", wantErr: true},
		{name: "no image", record: "Depends: libc6\n", wantErr: true},
		// Only the first record counts: a later one belongs to another package.
		{name: "second record", record: "Package: a\n\nDepends: linux-image-x (= 1)\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkg, version, err := parseMetapackage(tt.record)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseMetapackage = %s %s, want an error", pkg, version)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pkg != tt.pkg || version != tt.version {
				t.Fatalf("parseMetapackage = %s %s, want %s %s", pkg, version, tt.pkg, tt.version)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	dir := t.TempDir()
	if _, err := release(dir); err == nil {
		t.Fatal("release of a directory without lib/modules succeeded")
	}
	if err := os.MkdirAll(filepath.Join(dir, "lib", "modules", "6.1.0-56-cloud-amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := release(dir)
	if err != nil || got != "6.1.0-56-cloud-amd64" {
		t.Fatalf("release = %q, %v", got, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "lib", "modules", "6.1.0-57-cloud-amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := release(dir); err == nil {
		t.Fatalf("release with two module directories = %q, want an error", got)
	}
}

// TestUnpackedUsesTheCache: an entry whose unpack completed is used as it is, without apt;
// a directory left by an interrupted unpack (no marker) is not taken for the package.
func TestUnpackedUsesTheCache(t *testing.T) {
	cache := t.TempDir()
	p := Package{Name: "systemd-boot-efi", Version: "252.39-1~deb12u2", Arch: "arm64"}
	dir := filepath.Join(cache, "systemd-boot-efi_252.39-1~deb12u2_arm64")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// With no marker unpacked downloads; a PATH without apt-get makes that fail here.
	t.Setenv("PATH", t.TempDir())
	if _, err := unpacked(context.Background(), log, p, cache); err == nil {
		t.Fatal("an incomplete cache entry was used")
	}
	if err := os.WriteFile(filepath.Join(dir, completeMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := unpacked(context.Background(), log, p, cache)
	if err != nil || got != dir {
		t.Fatalf("unpacked = %q, %v; want the cached %s", got, err, dir)
	}
}
