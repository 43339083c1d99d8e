package pid1

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		name, cmdline string
		want          Cmdline
	}{{
		name:    "a test image on x86_64",
		cmdline: "BOOT_IMAGE=/vmlinuz console=ttyS0 panic=-1 quiet edgegate.ip=eth0:10.0.2.15/24:10.0.2.2 edgegate.ip=eth0:fd00::15/64:fd00::1 edgegate.ip=eth1:dhcp edgegate.test=1\n",
		want: Cmdline{
			IP: []IPConfig{
				{Dev: "eth0", Addr: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2")},
				{Dev: "eth0", Addr: netip.MustParsePrefix("fd00::15/64"), Gateway: netip.MustParseAddr("fd00::1")},
				{Dev: "eth1", DHCP: true},
			},
			Test: true,
		},
	}, {
		name:    "daemon flags: commas inside a list value stay",
		cmdline: "edgegate.flags=--proxy-mode=ipvs,--cluster-cidr=10.0.0.0/8,fd00::/8,--log-level=debug",
		want:    Cmdline{Flags: []string{"--proxy-mode=ipvs", "--cluster-cidr=10.0.0.0/8,fd00::/8", "--log-level=debug"}},
	}, {
		name:    "flags may repeat and be quoted",
		cmdline: `edgegate.flags=--zone=a "edgegate.flags=--hostname-override=gw 1"`,
		want:    Cmdline{Flags: []string{"--zone=a", "--hostname-override=gw 1"}},
	}, {
		name:    "a bare edgegate.test is on; a panic count for the probe",
		cmdline: "edgegate.test edgegate.test.panic=2",
		want:    Cmdline{Test: true, TestPanics: 2},
	}, {
		name:    "edgegate.test=0 is off",
		cmdline: "edgegate.test=0",
		want:    Cmdline{},
	}, {
		name:    "module parameters, as modprobe collects them",
		cmdline: `ip-vs.conn_tab_bits=12 nf_conntrack.hashsize=4096 virtio_net.napi_tx "mymod.name=two words"`,
		want: Cmdline{ModuleParams: map[string][]string{
			"ip_vs":        {"conn_tab_bits=12"},
			"nf_conntrack": {"hashsize=4096"},
			"virtio_net":   {"napi_tx"},
			"mymod":        {`name="two words"`},
		}},
	}, {
		name:    "data partition and bootstrap token",
		cmdline: "edgegate.data=LABEL=gw-state edgegate.token=abcdef.0123456789abcdef",
		want:    Cmdline{Data: DataSpec{Label: "gw-state"}, Token: "abcdef.0123456789abcdef"},
	}, {
		name:    "a bad data partition or token is reported without the token's value",
		cmdline: "edgegate.data=sdb1 edgegate.token= edgegate.token",
		want: Cmdline{Problems: []string{
			"edgegate.data=sdb1: want /dev/<name>, LABEL=<label> or PARTLABEL=<name>",
			"edgegate.token: empty",
			"edgegate.token: empty",
		}},
	}, {
		name:    "bad entries are reported and skipped",
		cmdline: "edgegate.ip=eth0 edgegate.ip=eth0:10.0.2.15 edgegate.ip=eth0:10.0.2.15/24:fd00::1 edgegate.test=maybe edgegate.test.panic=-1 edgegate.ip=eth0:dhcp",
		want: Cmdline{
			IP: []IPConfig{{Dev: "eth0", DHCP: true}},
			Problems: []string{
				"edgegate.ip=eth0: want <dev>:dhcp or <dev>:<addr>/<prefix>[:<gateway>]",
				`edgegate.ip=eth0:10.0.2.15: address "10.0.2.15" has no /prefix length`,
				"edgegate.ip=eth0:10.0.2.15/24:fd00::1: gateway fd00::1 is not in the address's family",
				"edgegate.test=maybe: not a boolean",
				"edgegate.test.panic=-1: not a count",
			},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseCmdline(tc.cmdline)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})); diff != "" {
				t.Errorf("ParseCmdline(%q) (-want +got):\n%s", tc.cmdline, diff)
			}
		})
	}
}

func TestParseIPConfig(t *testing.T) {
	checkParse(t, "ParseIPConfig", ParseIPConfig, map[string]string{
		"eth0:dhcp":                         "eth0:dhcp",
		"eth0:10.0.2.15/24":                 "eth0:10.0.2.15/24",
		"enp0s3:10.0.2.15/24:10.0.2.2":      "enp0s3:10.0.2.15/24:10.0.2.2",
		"eth0:fd00::15/64":                  "eth0:fd00::15/64",
		"eth0:fd00::15/64:fe80::1":          "eth0:fd00::15/64:fe80::1",
		"eth0:10.0.2.15/24:10.0.2.2:x":      "error",
		"eth0:10.0.2.15/33":                 "error",
		"eth0:10.0.2.15/24x":                "error",
		":10.0.2.15/24":                     "error",
		"a-name-longer-than-15:dhcp":        "error",
		"eth0:":                             "error",
		"eth0:10.0.2.15/24:not-an-ip":       "error",
		"eth0:fd00::15/64:10.0.2.2":         "error",
		"eth0:10.0.2.300/24:10.0.2.2":       "error",
		"eth0:10.0.2.15/24:":                "error",
		"eth0:DHCP":                         "error",
		"wlan0:192.168.1.10/24:192.168.1.1": "wlan0:192.168.1.10/24:192.168.1.1",
	})
}

// checkParse parses each input with parse, named name, and compares the result's String
// with the input's want; a want of "error" wants parse to fail.
func checkParse[T fmt.Stringer](t *testing.T, name string, parse func(string) (T, error), wants map[string]string) {
	t.Helper()
	for in, want := range wants {
		v, err := parse(in)
		got := v.String()
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%s(%q) = %q (err %v), want %q", name, in, got, err, want)
		}
	}
}
