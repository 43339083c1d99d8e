// Command egbundle makes signing keys, signed firmware update bundles, and verifies bundles
// the way a gateway does.
//
//	egbundle keys -dir DIR
//	egbundle make -board B -version V -kernel FILE -initramfs FILE -key FILE -out FILE
//	        [-security-epoch N] [-next-key FILE... -key-generation N]
//	egbundle verify -board B -pub FILE [-pub FILE...] [-running V] [-force] [-min-epoch N] BUNDLE
//
// Exit status: 0 done (verify: the bundle is good), 1 failed or refused, 2 usage.
package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/firmware/bundle"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  egbundle keys -dir DIR
  egbundle make -board B -version V -kernel FILE -initramfs FILE -key FILE -out FILE [-build-time RFC3339]
          [-security-epoch N] [-next-key FILE... -key-generation N]
  egbundle verify -board B -pub FILE [-pub FILE...] [-running V] [-force] [-min-epoch N] BUNDLE
`

// errUsage is a command line that does not parse; the flag package has said why.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func([]string, io.Writer, io.Writer) error{"keys": keys, "make": makeBundle, "verify": verify}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "egbundle: unknown command %q\n%s", args[0], usage)
		return 2
	}
	err := cmd(args[1:], stdout, stderr)
	switch {
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "egbundle %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("egbundle "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			fmt.Fprintf(fs.Output(), "%s: -%s is required\n", fs.Name(), name)
			return errUsage
		}
	}
	return nil
}

// keys writes a development key pair into dir unless one is there. An existing pair is
// checked, never replaced: gateways trust it and would refuse bundles signed with a new one.
func keys(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keys", stderr)
	dir := fs.String("dir", "", "directory for firmware.key (0600) and firmware.pub")
	if err := parse(fs, args, "dir"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egbundle keys: unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	privPath, pubPath := filepath.Join(*dir, "firmware.key"), filepath.Join(*dir, "firmware.pub")
	priv, err := bundle.ReadPrivateKeyFile(privPath)
	switch {
	case err == nil:
		if pub, err := bundle.ReadPublicKeyFile(pubPath); errors.Is(err, os.ErrNotExist) {
			if err := writeNew(pubPath, priv.Public().Marshal(), 0o644); err != nil {
				return err
			}
		} else if err != nil {
			return err
		} else if pub.ID != priv.ID {
			return fmt.Errorf("%s is key %s but %s is key %s: remove the wrong one", privPath, priv.ID, pubPath, pub.ID)
		}
		fmt.Fprintf(stdout, "key %s exists: %s, %s\n", priv.ID, privPath, pubPath)
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if _, err := os.Stat(pubPath); err == nil {
		return fmt.Errorf("%s exists without %s: restore the private key or remove the public one", pubPath, privPath)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	pub, priv, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	if err := writeNew(privPath, priv.Marshal(), 0o600); err != nil {
		return err
	}
	if err := writeNew(pubPath, pub.Marshal(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "key %s: %s, %s (new development key pair)\n", pub.ID, privPath, pubPath)
	return nil
}

// writeNew creates path with data, refusing to overwrite a file.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func makeBundle(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("make", stderr)
	board := fs.String("board", "", "board the bundle is for")
	version := fs.String("version", "", "firmware version (vMAJOR.MINOR.PATCH, git describe style allowed)")
	kernel := fs.String("kernel", "", "kernel image")
	initramfs := fs.String("initramfs", "", "initramfs (cpio.gz)")
	keyPath := fs.String("key", "", "private key file")
	out := fs.String("out", "", "bundle to write")
	buildTime := fs.String("build-time", "", "build time, RFC3339 (default: $SOURCE_DATE_EPOCH, else now)")
	epoch := fs.Uint64("security-epoch", 0, "security epoch: gateways that committed a higher one refuse the bundle, even forced")
	var nextKeys pubFlags
	fs.Var(&nextKeys, "next-key", "public key file of the next trusted key set (repeatable); gateways trust exactly these once the firmware commits")
	keyGen := fs.Uint64("key-generation", 0, "generation of the -next-key set, above every earlier one (the firmware's own keys are 0)")
	if err := parse(fs, args, "board", "version", "kernel", "initramfs", "key", "out"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egbundle make: unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	if (len(nextKeys) > 0) != (*keyGen > 0) {
		fmt.Fprintln(stderr, "egbundle make: -next-key and -key-generation go together")
		return errUsage
	}
	if _, err := bundle.ParseVersion(*version); err != nil {
		return fmt.Errorf("-version: %w (tag a release, git tag v0.1.0, or pass VERSION=vX.Y.Z to make)", err)
	}
	built, err := resolveBuildTime(*buildTime, os.Getenv("SOURCE_DATE_EPOCH"), time.Now())
	if err != nil {
		return err
	}
	key, err := bundle.ReadPrivateKeyFile(*keyPath)
	if err != nil {
		return err
	}
	rel := bundle.Release{Board: *board, Version: *version, BuildTime: built, SecurityEpoch: *epoch}
	if len(nextKeys) > 0 {
		keys, err := readPublicKeys(nextKeys)
		if err != nil {
			return fmt.Errorf("-next-key: %w", err)
		}
		rel.NextKeys = bundle.NewKeySet(*keyGen, keys)
	}
	// Written beside the target and renamed, so a failed make never leaves a partial bundle
	// under the bundle's name.
	tmp, err := os.CreateTemp(filepath.Dir(*out), filepath.Base(*out)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	m, err := bundle.CreateFiles(tmp, rel, *kernel, *initramfs, key)
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", *out)
	printManifest(stdout, m)
	return nil
}

func resolveBuildTime(flagValue, sourceDateEpoch string, now time.Time) (time.Time, error) {
	switch {
	case flagValue != "":
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("-build-time: %w", err)
		}
		return t, nil
	case sourceDateEpoch != "":
		sec, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a number of seconds", sourceDateEpoch)
		}
		return time.Unix(sec, 0), nil
	}
	return now, nil
}

// pubFlags collects repeated -pub flags.
type pubFlags []string

func (p *pubFlags) String() string     { return strings.Join(*p, ",") }
func (p *pubFlags) Set(v string) error { *p = append(*p, v); return nil }

func verify(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify", stderr)
	board := fs.String("board", "", "this gateway's board")
	var pubs pubFlags
	fs.Var(&pubs, "pub", "trusted public key file (repeatable)")
	running := fs.String("running", "", "running firmware version; the bundle must be newer")
	force := fs.Bool("force", false, "accept a bundle that is not newer than -running")
	minEpoch := fs.Uint64("min-epoch", 0, "the gateway's security epoch floor; a bundle below it is refused, -force or not")
	if err := parse(fs, args, "board", "pub"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "egbundle verify: want one bundle, got %d arguments\n", fs.NArg())
		return errUsage
	}
	if *running == "" && !*force {
		fmt.Fprintln(stderr, "egbundle verify: -running V or -force is required")
		return errUsage
	}
	policy := bundle.Policy{Board: *board, Running: *running, Force: *force, MinEpoch: *minEpoch}
	var err error
	if policy.Keys, err = readPublicKeys(pubs); err != nil {
		return err
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := bundle.Open(f, policy)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := b.CopyKernel(io.Discard); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := b.CopyInitramfs(io.Discard); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Fprintf(stdout, "%s\n", path)
	printManifest(stdout, b.Manifest())
	fmt.Fprintln(stdout, "OK")
	return nil
}

func readPublicKeys(paths []string) ([]bundle.PublicKey, error) {
	var keys []bundle.PublicKey
	for _, path := range paths {
		k, err := bundle.ReadPublicKeyFile(path)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func printManifest(w io.Writer, m bundle.Manifest) {
	fmt.Fprintf(w, "  board      %s\n", m.Board)
	fmt.Fprintf(w, "  version    %s\n", m.Version)
	fmt.Fprintf(w, "  buildTime  %s\n", m.BuildTime.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  keyID      %s\n", m.KeyID)
	fmt.Fprintf(w, "  epoch      %d\n", m.SecurityEpoch)
	fmt.Fprintf(w, "  kernel     %d bytes, sha256 %s\n", m.Kernel.Size, m.Kernel.SHA256)
	fmt.Fprintf(w, "  initramfs  %d bytes, sha256 %s\n", m.Initramfs.Size, m.Initramfs.SHA256)
	if m.NextKeys != nil {
		// Create and Open validated the set; its keys parse.
		keys, _ := m.NextKeys.PublicKeys()
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.ID
		}
		fmt.Fprintf(w, "  nextKeys   generation %d: %s\n", m.NextKeys.Generation, strings.Join(ids, ", "))
	}
}
