package board

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBoardsLoad(t *testing.T) {
	names := Names()
	for _, want := range []string{"generic-arm64", "pc-x86_64", "qemu-arm64", "qemu-x86_64"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() = %v, missing %s", names, want)
		}
	}
	// The kernel package, the QEMU binary and the console must agree with the arch: a board
	// file copied from the other arch and half edited would otherwise boot the wrong kernel.
	perArch := map[string]struct{ kernelSuffix, qemu, console string }{
		"amd64": {"-amd64", "qemu-system-x86_64", "ttyS0"},
		"arm64": {"-arm64", "qemu-system-aarch64", "ttyAMA0"},
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			b, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			want := perArch[b.Arch]
			if !strings.HasSuffix(b.Kernel, want.kernelSuffix) {
				t.Errorf("kernel %s does not end in %s", b.Kernel, want.kernelSuffix)
			}
			if b.QEMU.Binary != want.qemu {
				t.Errorf("qemu binary %s, want %s", b.QEMU.Binary, want.qemu)
			}
			if b.Console != want.console {
				t.Errorf("console %s, want %s", b.Console, want.console)
			}
			mods, err := b.AllModules()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"nf_tables", "ip_vs", "nf_conntrack", "efivarfs"} {
				if !slices.Contains(mods, m) {
					t.Errorf("modules lack %s", m)
				}
			}
			drivers, err := b.AllDrivers()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"virtio_pci", "virtio_net", "virtio_blk"} {
				if !slices.Contains(drivers, m) {
					t.Errorf("drivers lack %s", m)
				}
			}
			// The NIC model QEMU gives the board is one of its drivers' devices.
			nicDriver := map[string]string{"virtio-net-pci": "virtio_net", "e1000e": "e1000e"}[b.QEMU.NIC]
			if !slices.Contains(drivers, nicDriver) {
				t.Errorf("qemu nic %s: no driver %q among %v", b.QEMU.NIC, nicDriver, drivers)
			}
			seen := map[string]bool{}
			for _, m := range append(mods, drivers...) {
				if seen[m] {
					t.Errorf("module %s listed twice", m)
				}
				seen[m] = true
			}
			if args := strings.Join(b.KernelArgs(), " "); !strings.Contains(args, "console="+b.Console) {
				t.Errorf("kernel args %q lack the console", args)
			}
		})
	}
}

func TestLoadUnknown(t *testing.T) {
	_, err := Load("no-such-board")
	if !errors.Is(err, ErrUnknown) {
		t.Fatalf("Load(no-such-board) = %v, want ErrUnknown", err)
	}
}

func TestAllModulesKeepsOrderAndDropsDuplicates(t *testing.T) {
	b := Board{ModuleSets: []string{"machine", "virtio"}, Modules: []string{"softdog", "vfat"},
		Drivers: []string{"e1000e", "virtio_net", "igb"}}
	got, err := b.AllModules()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"efivarfs", "vfat", "nls_cp437", "nls_ascii", "ext4", "softdog"}
	if !slices.Equal(got, want) {
		t.Fatalf("AllModules() = %v, want %v", got, want)
	}
	got, err = b.AllDrivers()
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"virtio_pci", "virtio_net", "virtio_blk", "e1000e", "igb"}
	if !slices.Equal(got, want) {
		t.Fatalf("AllDrivers() = %v, want %v", got, want)
	}
	if _, err := (Board{ModuleSets: []string{"nope"}}).AllModules(); err == nil {
		t.Fatal("AllModules with an unknown set succeeded")
	}
	if _, err := (Board{ModuleSets: []string{"nope"}}).AllDrivers(); err == nil {
		t.Fatal("AllDrivers with an unknown set succeeded")
	}
}

func TestValidateModulesAndDrivers(t *testing.T) {
	b, err := Load("pc-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	both := b
	both.Modules = []string{"e1000e"}
	if err := both.validate(); err == nil || !strings.Contains(err.Error(), `module "e1000e" is both a module and a driver`) {
		t.Errorf("a module that is also a driver: %v", err)
	}
	bad := b
	bad.Drivers = []string{"kernel/e1000e.ko"}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "want a module name") {
		t.Errorf("a driver given as a path: %v", err)
	}
	disk := b
	disk.QEMU.Disk = "ide"
	if err := disk.validate(); err == nil || !strings.Contains(err.Error(), `disk "ide"`) {
		t.Errorf("an unknown disk kind: %v", err)
	}
}

func TestQEMUBoardsBootUEFI(t *testing.T) {
	// The disk image tests (qemu/image_test.go) boot every board through UEFI.
	for _, name := range Names() {
		b, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if b.QEMU.UEFI == nil {
			t.Errorf("%s: no qemu.uefi section", name)
		}
	}
}

func TestUEFIValidate(t *testing.T) {
	good := UEFI{Package: "ovmf", Code: "/usr/share/OVMF/OVMF_CODE_4M.fd", Vars: "/usr/share/OVMF/OVMF_VARS_4M.fd", Machine: "q35"}
	if err := good.validate(); err != nil {
		t.Fatalf("%+v: %v", good, err)
	}
	for name, tc := range map[string]struct {
		edit func(*UEFI)
		want string
	}{
		"no package":     {func(u *UEFI) { u.Package = "" }, "package is required"},
		"relative code":  {func(u *UEFI) { u.Code = "OVMF_CODE_4M.fd" }, `code "OVMF_CODE_4M.fd"`},
		"unclean vars":   {func(u *UEFI) { u.Vars = "/usr/share/OVMF/../OVMF/OVMF_VARS_4M.fd" }, "vars"},
		"comma in vars":  {func(u *UEFI) { u.Vars = "/tmp/a,b.fd" }, `vars "/tmp/a,b.fd"`},
		"no vars":        {func(u *UEFI) { u.Vars = "" }, `vars ""`},
		"code is vars":   {func(u *UEFI) { u.Vars = u.Code }, "the same file"},
		"machine absent": {func(u *UEFI) { u.Machine = "" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			u := good
			tc.edit(&u)
			err := u.validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%+v: %v", u, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%+v: %v, want an error with %q", u, err, tc.want)
			}
		})
	}
}
