package dataplane

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/edgegate/edgegate/daemon/plan/ipt"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// daemon is edgegate running as a plain daemon in the gateway's namespace.
type daemon struct {
	cmd     *exec.Cmd
	started time.Time
	logDone chan struct{}
	exited  chan struct{}
	waitErr error

	mu       sync.Mutex
	tail     []string // the last lines of its log, for errors
	fullSync string   // "took" of its last full "rules programmed" line
	syncs    int      // full syncs logged
}

// daemonArgs are the flags of every measurement. Periodic syncs are pushed out of the
// measurement's way (an hour): a full resync of 30k Services in the middle of a
// measurement would be measured too. The conntrack table and its timeouts are left alone:
// they are the host's, shared by every namespace.
func daemonArgs(mode, manifests, stateDir string) []string {
	return []string{
		"--proxy-mode=" + mode,
		"--manifests=" + manifests,
		"--hostname-override=bench-gateway",
		"--node-ip=" + gatewayToClient.String(),
		"--state-dir=" + stateDir,
		"--dashboard-bind-address=",
		"--healthz-bind-address=127.0.0.1:10256",
		"--metrics-bind-address=127.0.0.1:10249",
		"--sync-period=1h",
		"--full-sync-period=1h",
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}
}

// startDaemon starts bin with args in gw's namespace, its output going to logPath.
func startDaemon(gw node, bin string, args []string, logPath string) (*daemon, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("edgegate log: %w", err)
	}
	fmt.Fprintf(logf, "--- %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	// If the benchmark dies, edgegate must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("edgegate: %w", err)
	}
	cmd.Stdout = cmd.Stderr
	d := &daemon{cmd: cmd, logDone: make(chan struct{}), exited: make(chan struct{})}
	d.started = time.Now()
	if err := gw.Start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("edgegate: %w", err)
	}
	go d.readLog(out, logf)
	go func() {
		<-d.logDone // Wait closes the pipe: read it to its end first
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// programmedLine matches the daemon's log line after a full sync.
var programmedLine = regexp.MustCompile(`msg="rules programmed".* full=true .*took=(\S+)`)

func (d *daemon) readLog(r io.Reader, logf *os.File) {
	defer close(d.logDone)
	defer logf.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		d.mu.Lock()
		if m := programmedLine.FindStringSubmatch(line); m != nil {
			d.fullSync = m[1]
			d.syncs++
		}
		d.tail = append(d.tail, line)
		if len(d.tail) > 20 {
			d.tail = d.tail[1:]
		}
		d.mu.Unlock()
	}
}

// lastFullSync returns the "took" of the last full sync the daemon logged, and how many
// it logged.
func (d *daemon) lastFullSync() (string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fullSync, d.syncs
}

// exitError says how the daemon ended, with its last log lines; nil while it runs.
func (d *daemon) exitError() error {
	select {
	case <-d.exited:
	default:
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Errorf("edgegate (pid %d) exited: %v; its log ends:\n  %s", d.cmd.Process.Pid, d.waitErr, strings.Join(d.tail, "\n  "))
}

// stop ends the daemon by its PID: SIGTERM, then SIGKILL after 10 s.
func (d *daemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// cpuTime is the CPU time the daemon has used so far (user + system).
func (d *daemon) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("edgegate CPU time: %w", err)
	}
	// The command name may hold spaces: fields count from after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("edgegate CPU time: unreadable /proc/pid/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("edgegate CPU time: short /proc/pid/stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// programmedServices counts the Services of the given mode the gateway's kernel holds,
// read over netlink and procfs (the guest has no nft, iptables-save nor ipvsadm): the
// elements of nftables mode's service map (in all its tables), the rules of iptables
// mode's SERVICES chain that jump to a Service's chain, IPVS's virtual servers. edgegate
// writes each sync in one transaction (IPVS: one sync), so the count reaching N means the
// whole rule set is there.
func programmedServices(gw node, mode string) (int, error) {
	switch mode {
	case "nftables":
		conn, err := nftables.New(nftables.WithNetNSFd(int(gw.ns)))
		if err != nil {
			return 0, fmt.Errorf("nftables in %s: %w", gw.Name, err)
		}
		// A large cluster's dispatch is split over edgegate-services-<k> (nft.Shards):
		// the map's elements are summed over every table of the mode.
		tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
		if err != nil {
			return 0, fmt.Errorf("nftables tables in %s: %w", gw.Name, err)
		}
		n := 0
		for _, t := range tables {
			if !nft.ModeTable(t.Name) {
				continue
			}
			set, err := conn.GetSetByName(t, nft.MapServiceIPs)
			if err != nil {
				continue // no map in this table (the main one of a split), or not yet
			}
			elems, err := conn.GetSetElements(set)
			if err != nil {
				return 0, fmt.Errorf("map ip %s %s in %s: %w", t.Name, nft.MapServiceIPs, gw.Name, err)
			}
			for _, e := range elems {
				// Service IPs only: the load runs' Service also has a LoadBalancer IP.
				if len(e.Key) >= 4 && clusterIPRange.Contains(netip.AddrFrom4([4]byte(e.Key[:4]))) {
					n++
				}
			}
		}
		return n, nil
	case "iptables":
		conn, err := nftables.New(nftables.WithNetNSFd(int(gw.ns)))
		if err != nil {
			return 0, fmt.Errorf("nftables in %s: %w", gw.Name, err)
		}
		rules, err := conn.GetRules(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "nat"}, &nftables.Chain{Name: ipt.ChainServices})
		if err != nil {
			return 0, nil // no nat table or chain yet
		}
		n := 0
		for _, r := range rules {
			for _, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictJump && strings.HasPrefix(v.Chain, ipt.Prefix+"SVC-") {
					n++
				}
			}
		}
		return n, nil
	case "ipvs":
		table, err := gw.ReadProcNet("ip_vs")
		if err != nil {
			return 0, fmt.Errorf("IPVS table of %s: %w", gw.Name, err)
		}
		n := 0
		for line := range bytes.Lines(table) {
			// "TCP 0A600001:0050 rr": ClusterIP virtual servers only (10.96.0.0/16 is 0A60).
			if bytes.HasPrefix(line, []byte("TCP  0A60")) || bytes.HasPrefix(line, []byte("TCP 0A60")) {
				n++
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("mode %q: want nftables, iptables or ipvs", mode)
}

// clusterIPRange holds every Service's ClusterIP (services.ClusterIP).
var clusterIPRange = netip.MustParsePrefix("10.96.0.0/16")

// ipvsDummy is where ipvs mode puts the VIPs.
const ipvsDummy = "edgegate-ipvs0"

// dropIPVS removes ipvs mode's virtual servers and VIP interface from the gateway once the
// daemon has stopped: done here, the kernel's cost of tearing down 30k of them is paid
// before the next measurement rather than by the namespace's deferred cleanup during it.
func dropIPVS(gw node) error {
	if err := gw.FlushIPVS(); err != nil {
		return fmt.Errorf("flush IPVS in %s: %w", gw.Name, err)
	}
	return withLinks(gw, func(nl *netlink.Handle) error {
		link, err := nl.LinkByName(ipvsDummy)
		if err != nil {
			return nil // not there
		}
		if err := nl.LinkDel(link); err != nil {
			return fmt.Errorf("delete %s in %s: %w", ipvsDummy, gw.Name, err)
		}
		return nil
	})
}
