package initramfs

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTree writes a kernel module tree:
//
//	a        depends b,c; soft pre-dependency on "crcalias"
//	b        depends c
//	c
//	crc-impl alias crcalias; xz-compressed, dashed file name
//	d        soft post-dependency on e; zstd-compressed
//	e
//	f        soft pre-dependency on something this kernel lacks
//	builtin_one (modules.builtin) alias balias (modules.builtin.modinfo)
func fakeTree(t *testing.T) (dir string, crcImage []byte) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "lib", "modules", "6.1.0-test")
	writeModule(t, dir, "kernel/net/a.ko", "name=a", "depends=b,c", "softdep=pre: crcalias")
	writeModule(t, dir, "kernel/net/b.ko", "name=b", "depends=c")
	writeModule(t, dir, "kernel/net/c.ko", "name=c", "depends=")
	crcImage = writeModule(t, dir, "kernel/lib/crc-impl.ko.xz", "name=crc_impl", "alias=crcalias", "alias=crypto-crcalias")
	writeModule(t, dir, "kernel/net/d.ko.zst", "name=d", "softdep=post: e")
	writeModule(t, dir, "kernel/net/e.ko", "name=e")
	writeModule(t, dir, "kernel/net/f.ko", "name=f", "softdep=pre: no_such_thing")
	writeFile(t, filepath.Join(dir, "modules.builtin"), []byte("kernel/lib/builtin_one.ko\n"))
	writeFile(t, filepath.Join(dir, "modules.builtin.modinfo"), []byte("builtin_one.alias=balias\x00builtin_one.license=GPL\x00"))
	return dir, crcImage
}

func names(mods []Module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Name)
	}
	return out
}

func TestResolveModulesOrder(t *testing.T) {
	dir, crcImage := fakeTree(t)
	got, err := ResolveModules(dir, []string{"a", "d", "builtin_one", "balias", "f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// a's soft pre-dependency comes first (through its alias), then a's dependencies in
	// depth-first order, then a; d is followed by its soft post-dependency e.
	want := []string{"crc_impl", "c", "b", "a", "d", "e", "f"}
	if !slices.Equal(names(got.Order), want) {
		t.Errorf("order = %v, want %v", names(got.Order), want)
	}
	if want := []string{"balias", "builtin_one"}; !slices.Equal(got.Builtin, want) {
		t.Errorf("builtin = %v, want %v", got.Builtin, want)
	}
	if want := []string{"no_such_thing"}; !slices.Equal(got.MissingSoftdeps, want) {
		t.Errorf("missing softdeps = %v, want %v", got.MissingSoftdeps, want)
	}
	for _, m := range got.Order {
		switch m.Name {
		case "crc_impl":
			if m.Path != "kernel/lib/crc-impl.ko" {
				t.Errorf("crc_impl path %s, want the decompressed kernel/lib/crc-impl.ko", m.Path)
			}
			if !bytes.Equal(m.Image, crcImage) {
				t.Error("crc_impl image is not the decompressed module")
			}
		case "d":
			if m.Path != "kernel/net/d.ko" {
				t.Errorf("d path %s, want kernel/net/d.ko", m.Path)
			}
		}
	}
}

func TestResolveModulesDashesAndAliases(t *testing.T) {
	dir, _ := fakeTree(t)
	// A name with dashes finds the module, and an alias finds the module declaring it.
	for _, name := range []string{"crc-impl", "crc_impl", "crypto-crcalias"} {
		got, err := ResolveModules(dir, []string{name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(got.Order), []string{"crc_impl"}) {
			t.Errorf("%s: order = %v, want [crc_impl]", name, names(got.Order))
		}
	}
}

func TestResolveModulesBuiltinBeatsAlias(t *testing.T) {
	dir, _ := fakeTree(t)
	// Now the kernel has a built-in crcalias too: a's soft dependency needs no module
	// (the cloud kernels' built-in crc32c, where generic ones have crc32c_generic.ko).
	writeFile(t, filepath.Join(dir, "modules.builtin.modinfo"), []byte("builtin_one.alias=crcalias\x00"))
	got, err := ResolveModules(dir, []string{"a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(names(got.Order), want) {
		t.Errorf("order = %v, want %v", names(got.Order), want)
	}
	if want := []string{"crcalias"}; !slices.Equal(got.Builtin, want) {
		t.Errorf("builtin = %v, want %v", got.Builtin, want)
	}
}

func TestResolveModulesErrors(t *testing.T) {
	dir, _ := fakeTree(t)
	if _, err := ResolveModules(dir, []string{"nope"}, nil); !errors.Is(err, ErrUnknownModule) {
		t.Errorf("unknown module: err = %v, want ErrUnknownModule", err)
	}
	writeModule(t, dir, "kernel/net/g.ko", "name=g", "depends=gone")
	if _, err := ResolveModules(dir, []string{"g"}, nil); !errors.Is(err, ErrUnknownModule) || !strings.Contains(err.Error(), "module g") {
		t.Errorf("missing hard dependency: err = %v, want ErrUnknownModule naming g", err)
	}
	writeModule(t, dir, "kernel/net/x.ko", "name=x", "softdep=pre: y")
	writeModule(t, dir, "kernel/net/y.ko", "name=y", "depends=x")
	if _, err := ResolveModules(dir, []string{"x"}, nil); err == nil || !strings.Contains(err.Error(), "cycle: x -> y -> x") {
		t.Errorf("cycle: err = %v, want a cycle x -> y -> x", err)
	}
	writeModule(t, dir, "kernel/other/c.ko.xz", "name=c")
	if _, err := ResolveModules(dir, []string{"c"}, nil); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("two files for one module: err = %v", err)
	}
}

func TestResolveModulesDrivers(t *testing.T) {
	dir, _ := fakeTree(t)
	// nic needs b (already loaded at every boot through a) and mdio, which only it needs;
	// disk needs nothing; both declare device aliases.
	writeModule(t, dir, "kernel/drivers/nic.ko", "name=nic", "depends=b,mdio", "alias=pci:v00008086d000010D3sv*sd*bc*sc*i*", "alias=pci:v00008086d000010D4sv*sd*bc*sc*i*")
	writeModule(t, dir, "kernel/drivers/mdio.ko", "name=mdio")
	writeModule(t, dir, "kernel/drivers/disk.ko", "name=disk", "alias=virtio:d00000002v*")
	got, err := ResolveModules(dir, []string{"a"}, []string{"nic", "disk"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"crc_impl", "c", "b", "a"}; !slices.Equal(names(got.Order), want) {
		t.Errorf("order = %v, want %v", names(got.Order), want)
	}
	if want := []string{"mdio", "nic", "disk"}; !slices.Equal(names(got.Drivers), want) {
		t.Errorf("drivers = %v, want %v", names(got.Drivers), want)
	}
	for name, want := range map[string][]string{
		"nic": {"c", "b", "mdio"}, "disk": {}, "a": {"crc_impl", "c", "b"}, "b": {"c"}, "mdio": {},
	} {
		if !slices.Equal(got.Deps[name], want) {
			t.Errorf("deps of %s = %v, want %v", name, got.Deps[name], want)
		}
	}
	want := []Alias{
		{"pci:v00008086d000010D3sv*sd*bc*sc*i*", "nic"}, {"pci:v00008086d000010D4sv*sd*bc*sc*i*", "nic"},
		{"virtio:d00000002v*", "disk"},
	}
	if !slices.Equal(got.Aliases, want) {
		t.Errorf("aliases = %v, want %v", got.Aliases, want)
	}

	// A driver without aliases could only load at every boot: the board file is wrong.
	if _, err := ResolveModules(dir, nil, []string{"mdio"}); err == nil || !strings.Contains(err.Error(), "driver mdio: module mdio declares no device aliases") {
		t.Errorf("driver without aliases: err = %v", err)
	}
	if _, err := ResolveModules(dir, nil, []string{"nope"}); !errors.Is(err, ErrUnknownModule) || !strings.Contains(err.Error(), "driver nope") {
		t.Errorf("unknown driver: err = %v", err)
	}
}
