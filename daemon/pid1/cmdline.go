package pid1

import (
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/firmware/layout"
)

// Cmdline is what PID 1 reads from the kernel command line (/proc/cmdline).
type Cmdline struct {
	// IP holds the edgegate.ip= entries in the order given; entries that do not parse are
	// in Problems instead.
	IP []IPConfig
	// Flags are the daemon's flags from edgegate.flags=.
	Flags []string
	// Test is edgegate.test=1: run /edgegate-test after boot, then power off.
	Test bool
	// TestPanics is edgegate.test.panic=<n>: in a test image, the daemon panics n times,
	// each after a sync, so a boot test can watch the supervisor restart it.
	TestPanics int
	// DaemonMemory is edgegate.daemon.memory=: the daemon's cgroup memory limit in bytes
	// (a K, M or G suffix allowed); -1 for "max" (no limit); 0 when not given (see
	// daemonMemoryLimit).
	DaemonMemory int64
	// DaemonHang is edgegate.daemon.hang=: how long the daemon may go without reporting, or
	// with a part of it stuck, before PID 1 kills and restarts it; 0 when not given.
	DaemonHang time.Duration
	// Data is edgegate.data=: where the persistent data partition is; zero means the
	// default search (see findDataPartition).
	Data DataSpec
	// Slot is edgegate.slot=: the A/B firmware slot the boot loader booted (its entry's
	// options name it, see firmware/layout).
	Slot layout.Slot
	// Token is edgegate.token=: a bearer (bootstrap) token for the API server, which PID 1
	// writes to a file for the daemon. It prints as <redacted>, so logging a Cmdline never
	// leaks it.
	Token Secret
	// ModuleParams holds <module>.<param>=<value> entries by module name (dashes as
	// underscores), what modprobe would pass to finit_module.
	ModuleParams map[string][]string
	// KernelNICNames is edgegate.ifnames=kernel: keep the names the kernel gave the NICs
	// instead of naming them by their place on the bus (see nameNICs).
	KernelNICNames bool
	// Problems lists the edgegate.* entries that were ignored, and why.
	Problems []string
}

// IPConfig is one edgegate.ip= entry: a static address (with an optional default gateway)
// or DHCPv4 on a device.
type IPConfig struct {
	Dev     string
	DHCP    bool
	Addr    netip.Prefix // static address; the host bits are kept
	Gateway netip.Addr   // optional default gateway for Addr's family
}

func (c IPConfig) String() string {
	switch {
	case c.DHCP:
		return c.Dev + ":dhcp"
	case c.Gateway.IsValid():
		return c.Dev + ":" + c.Addr.String() + ":" + c.Gateway.String()
	}
	return c.Dev + ":" + c.Addr.String()
}

// ParseCmdline parses the kernel command line. Unknown parameters are ignored: they belong
// to the kernel or to modules.
func ParseCmdline(s string) Cmdline {
	c := Cmdline{ModuleParams: map[string][]string{}}
	for _, p := range splitCmdline(s) {
		key, value, hasValue := strings.Cut(p, "=")
		switch key {
		case "edgegate.ip":
			ip, err := ParseIPConfig(value)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.ip=%s: %v", value, err))
				continue
			}
			c.IP = append(c.IP, ip)
		case "edgegate.flags":
			c.Flags = append(c.Flags, splitFlags(value)...)
		case "edgegate.data":
			d, err := ParseDataSpec(value)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.data=%s: %v", value, err))
				continue
			}
			c.Data = d
		case layout.SlotParam:
			slot, err := layout.ParseSlot(value)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("%s=%s: %v", layout.SlotParam, value, err))
				continue
			}
			c.Slot = slot
		case "edgegate.token":
			// The value never goes into a problem: Problems are logged.
			if value == "" {
				c.Problems = append(c.Problems, "edgegate.token: empty")
				continue
			}
			c.Token = Secret(value)
		case "edgegate.test":
			if !hasValue {
				c.Test = true
				continue
			}
			on, err := strconv.ParseBool(value)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.test=%s: not a boolean", value))
			}
			c.Test = on
		case "edgegate.test.panic":
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.test.panic=%s: not a count", value))
				continue
			}
			c.TestPanics = n
		case "edgegate.daemon.memory":
			n, err := parseBytes(value)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.daemon.memory=%s: %v", value, err))
				continue
			}
			c.DaemonMemory = n
		case "edgegate.ifnames":
			switch value {
			case "kernel":
				c.KernelNICNames = true
			case "bus":
			default:
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.ifnames=%s: want bus or kernel", value))
			}
		case "edgegate.daemon.hang":
			d, err := time.ParseDuration(value)
			if err != nil || d < time.Second {
				c.Problems = append(c.Problems, fmt.Sprintf("edgegate.daemon.hang=%s: not a duration of a second or more", value))
				continue
			}
			c.DaemonHang = d
		default:
			// modprobe's rule: a dotted parameter names a module's parameter.
			module, param, ok := strings.Cut(key, ".")
			if ok && module != "" && param != "" && module != "edgegate" {
				name := strings.ReplaceAll(module, "-", "_")
				arg := param
				if hasValue {
					arg += "=" + quoteParam(value)
				}
				c.ModuleParams[name] = append(c.ModuleParams[name], arg)
			}
		}
	}
	return c
}

// splitCmdline splits like the kernel's next_arg: on spaces, except inside double quotes,
// which are removed.
func splitCmdline(s string) []string {
	var params []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			have = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n'):
			if have {
				params = append(params, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		params = append(params, cur.String())
	}
	return params
}

// quoteParam puts back the quotes the kernel would need to see a value with spaces as one.
func quoteParam(v string) string {
	if strings.ContainsAny(v, " \t") {
		return `"` + v + `"`
	}
	return v
}

// splitFlags splits edgegate.flags on the commas that start a new flag, so list values keep
// theirs: "--cluster-cidr=10.0.0.0/8,fd00::/8,--log-level=debug" is two flags.
func splitFlags(s string) []string {
	var flags []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' && i+1 < len(s) && s[i+1] == '-' {
			flags = append(flags, s[start:i])
			start = i + 1
		}
	}
	flags = append(flags, s[start:])
	out := flags[:0]
	for _, f := range flags {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseIPConfig parses "<dev>:dhcp" or "<dev>:<addr>/<prefix>[:<gateway>]" (IPv4 or IPv6;
// the prefix length ends the address, so IPv6 colons need no brackets).
func ParseIPConfig(s string) (IPConfig, error) {
	dev, rest, ok := strings.Cut(s, ":")
	if !ok || dev == "" || rest == "" {
		return IPConfig{}, fmt.Errorf("want <dev>:dhcp or <dev>:<addr>/<prefix>[:<gateway>]")
	}
	if len(dev) > 15 || strings.ContainsAny(dev, "/ ") {
		return IPConfig{}, fmt.Errorf("%q is not a network device name", dev)
	}
	if rest == "dhcp" {
		return IPConfig{Dev: dev, DHCP: true}, nil
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return IPConfig{}, fmt.Errorf("address %q has no /prefix length", rest)
	}
	end := slash + 1
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	addr, err := netip.ParsePrefix(rest[:end])
	if err != nil {
		return IPConfig{}, fmt.Errorf("address: %w", err)
	}
	c := IPConfig{Dev: dev, Addr: addr}
	if end == len(rest) {
		return c, nil
	}
	if rest[end] != ':' {
		return IPConfig{}, fmt.Errorf("unexpected %q after the address", rest[end:])
	}
	gw, err := netip.ParseAddr(rest[end+1:])
	if err != nil {
		return IPConfig{}, fmt.Errorf("gateway: %w", err)
	}
	if gw.Is4() != addr.Addr().Is4() {
		return IPConfig{}, fmt.Errorf("gateway %s is not in the address's family", gw)
	}
	c.Gateway = gw
	return c, nil
}

// Secret is a value that must not reach a log: fmt and log/slog print it as <redacted>.
type Secret string

const redacted = "<redacted>"

func (Secret) String() string   { return redacted }
func (Secret) GoString() string { return redacted }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// DataSpec is how edgegate.data= names the persistent data partition: exactly one field is
// set. There is no udev in the firmware, so there is no /dev/disk/by-*: a label is found by
// reading the devices themselves.
type DataSpec struct {
	// Device is a device node, /dev/vdb or /dev/mmcblk0p3.
	Device string
	// Label is LABEL=: the ext4 file system's volume name.
	Label string
	// PartLabel is PARTLABEL=: the GPT partition's name.
	PartLabel string
}

// IsZero reports whether the command line named no data partition.
func (d DataSpec) IsZero() bool { return d == DataSpec{} }

func (d DataSpec) String() string {
	switch {
	case d.Label != "":
		return "LABEL=" + d.Label
	case d.PartLabel != "":
		return "PARTLABEL=" + d.PartLabel
	}
	return d.Device
}

// ParseDataSpec parses "/dev/<name>", "LABEL=<label>" or "PARTLABEL=<name>".
func ParseDataSpec(s string) (DataSpec, error) {
	if v, ok := strings.CutPrefix(s, "LABEL="); ok {
		if v == "" || len(v) > ext4LabelLen {
			return DataSpec{}, fmt.Errorf("an ext4 label has 1 to %d bytes", ext4LabelLen)
		}
		return DataSpec{Label: v}, nil
	}
	if v, ok := strings.CutPrefix(s, "PARTLABEL="); ok {
		if v == "" {
			return DataSpec{}, fmt.Errorf("empty partition name")
		}
		return DataSpec{PartLabel: v}, nil
	}
	if name, ok := strings.CutPrefix(s, "/dev/"); ok && name != "" && !strings.Contains(name, "..") {
		return DataSpec{Device: path.Clean(s)}, nil
	}
	return DataSpec{}, fmt.Errorf("want /dev/<name>, LABEL=<label> or PARTLABEL=<name>")
}
