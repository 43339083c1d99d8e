package pid1

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Paths of the image's configuration (see the firmware contract).
const (
	configFile   = "/etc/edgegate/config.yaml"
	manifestsDir = "/etc/edgegate/manifests"
)

// edgegate.token's file, on /run (a tmpfs): a token from the kernel command line never
// reaches a disk. A token meant to last belongs on the data partition instead, named by its
// config.yaml (tokenFile: /var/lib/edgegate/token), which PID 1 leaves to the daemon.
const (
	tokenDir  = "/run/edgegate"
	tokenFile = tokenDir + "/token"
)

// writeToken writes edgegate.token for the daemon's --token-file, readable by PID 1's user
// only. The command line itself is no vault (/proc/cmdline is world-readable, and the kernel
// logs it at boot), so the token there is for first contact, and PID 1's own logs never
// print it.
func (m *Machine) writeToken() {
	if m.cmdline.Token == "" {
		return
	}
	if err := writePrivateFile(m.path(tokenDir), m.path(tokenFile), []byte(string(m.cmdline.Token)+"\n")); err != nil {
		m.log.Error("writing the bootstrap token failed; the daemon does not get it", "file", tokenFile, "err", err)
		return
	}
	m.tokenFile = tokenFile
	m.log.Info("bootstrap token from the kernel command line", "file", tokenFile)
}

// writePrivateFile writes file (0600) in dir (0700), both created or tightened as needed.
func writePrivateFile(dir, file string, b []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// daemonSettings is what PID 1 must know of the daemon's configuration to add flags the
// daemon accepts: whether it joins a cluster, and whether it names its own manifests.
type daemonSettings struct {
	kubeconfig, apiServer string
	manifests             bool
}

func (s daemonSettings) cluster() bool { return s.kubeconfig != "" || s.apiServer != "" }

// fromFile reads the keys of a config.yaml. A file that does not parse is the daemon's to
// report.
func (s *daemonSettings) fromFile(b []byte) {
	var keys map[string]any
	if yaml.Unmarshal(b, &keys) != nil {
		return
	}
	_, s.manifests = keys["manifests"]
	s.kubeconfig, _ = keys["kubeconfig"].(string)
	s.apiServer, _ = keys["apiServer"].(string)
}

// fromFlags applies flags over the file, as the daemon does. The daemon's flag package
// takes -name=value and --name=value; edgegate.flags cannot pass a value as a separate
// argument.
func (s *daemonSettings) fromFlags(flags []string) {
	for _, f := range flags {
		name, value := flagNameValue(f)
		switch name {
		case "kubeconfig":
			s.kubeconfig = value
		case "api-server", "master":
			s.apiServer = value
		case "manifests":
			s.manifests = true
		}
	}
}

func flagNameValue(f string) (name, value string) {
	f, ok := strings.CutPrefix(f, "--")
	if !ok {
		f = strings.TrimPrefix(f, "-")
	}
	name, value, _ = strings.Cut(f, "=")
	return name, value
}

// daemonConfig picks the daemon's configuration file: a --config in edgegate.flags, else the
// data partition's (the gateway's own), else the image's default. It returns the file (a
// path on the machine, "" when there is none), where it came from, and its content.
func (m *Machine) daemonConfig() (file, from string, content []byte) {
	for _, f := range m.cmdline.Flags {
		if name, value := flagNameValue(f); name == "config" {
			file, from = value, "edgegate.flags"
		}
	}
	if from != "" {
		if file != "" {
			// Unreadable: the daemon says so when it starts.
			content, _ = os.ReadFile(m.path(file))
		}
		return file, from, content
	}
	for _, c := range []struct{ file, from string }{{dataConfigFile, "data partition"}, {configFile, "image"}} {
		if c.file == dataConfigFile && m.skipDataConfig {
			continue
		}
		b, err := os.ReadFile(m.path(c.file))
		switch {
		case err == nil:
			return c.file, c.from, b
		case !errors.Is(err, fs.ErrNotExist):
			m.log.Error("reading a daemon configuration failed", "file", c.file, "err", err)
		}
	}
	return "", "", nil
}

// daemonArgs are the daemon's command-line arguments on this machine. The daemon's flags
// win over its --config file, and a later flag over an earlier one, so the order is the
// precedence, lowest first:
//   - --config: the data partition's config.yaml, else the image's;
//   - --manifests: the image's baked manifests, unless the configuration names its own or
//     joins a cluster, which the daemon refuses to combine with manifests;
//   - --token-file: edgegate.token's file (see writeToken);
//   - the kernel's edgegate.flags, which win.
func (m *Machine) daemonArgs() []string {
	var args []string
	file, from, content := m.daemonConfig()
	switch {
	case from == "edgegate.flags":
		// The flag itself reaches the daemon with the others.
		m.log.Info("daemon configuration", "file", file, "from", from)
	case file != "":
		m.log.Info("daemon configuration", "file", file, "from", from)
		args = append(args, "--config="+m.path(file))
	default:
		m.log.Info("no daemon configuration file; the daemon's defaults and edgegate.flags")
	}
	var s daemonSettings
	s.fromFile(content)
	s.fromFlags(m.cmdline.Flags)

	if st, err := os.Stat(m.path(manifestsDir)); err == nil && st.IsDir() {
		switch {
		case s.cluster():
			m.log.Info("baked manifests not used: the daemon joins a cluster", "manifests", manifestsDir)
		case !s.manifests:
			args = append(args, "--manifests="+m.path(manifestsDir))
		}
	}
	if m.tokenFile != "" {
		if s.kubeconfig != "" {
			// The daemon refuses --token-file next to a kubeconfig.
			m.log.Warn("edgegate.token not used: the kubeconfig carries the credentials", "kubeconfig", s.kubeconfig)
		} else {
			if s.apiServer == "" {
				m.log.Warn("edgegate.token without an API server (apiServer or --api-server): the daemon runs standalone")
			}
			args = append(args, "--token-file="+m.path(m.tokenFile))
		}
	}
	return append(args, m.cmdline.Flags...)
}
