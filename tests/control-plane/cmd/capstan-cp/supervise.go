package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	// kwokNodeSelector is the annotation that marks fake nodes managed by kwok
	// (the one Karpenter's kwok provider puts on its nodes).
	kwokNodeSelector = "kwok.x-k8s.io/node=fake"
	maxAttempts      = 3
)

var errPortInUse = errors.New("port already in use")

type options struct {
	dir          string
	kwokBin      string
	noCM         bool
	noScheduler  bool
	noKwok       bool
	watchStdin   bool
	startTimeout time.Duration
	// kubeAPIQPS and kubeAPIBurst, when > 0, raise the client rate limits of
	// kube-controller-manager and kube-scheduler (their defaults, 20/30 and 50/100,
	// make them the floor of a large scale-up; kwokctl's --disable-qps-limits does the same).
	kubeAPIQPS   int
	kubeAPIBurst int
	// scale sets the control plane up for thousands of nodes and tens of thousands of
	// pods (see scaleArgs).
	scale bool
	// auditUsers, when set, makes kube-apiserver write one audit line (level Metadata, when the
	// request completes) for every request of these users to logs/audit.log.
	auditUsers string
	// simulateBusyPort makes the first start attempt find the API server's port taken
	// (exercises the retry path in tests).
	simulateBusyPort bool
}

func parseOptions(name string, args []string) (*options, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.dir, "dir", "", "state directory (kubeconfig, pki, logs, etcd data)")
	fs.StringVar(&o.kwokBin, "kwok-bin", "", "path of the kwok binary (default: kwok beside this binary)")
	fs.BoolVar(&o.noCM, "no-controller-manager", false, "do not run kube-controller-manager")
	fs.BoolVar(&o.noScheduler, "no-scheduler", false, "do not run kube-scheduler")
	fs.BoolVar(&o.noKwok, "no-kwok", false, "do not run kwok")
	fs.BoolVar(&o.watchStdin, "watch-stdin", false, "stop everything when standard input closes (the parent died)")
	fs.DurationVar(&o.startTimeout, "start-timeout", 180*time.Second, "how long to wait for everything to become ready")
	fs.IntVar(&o.kubeAPIQPS, "kube-api-qps", 0, "client QPS of kube-controller-manager and kube-scheduler (0: their defaults)")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 0, "client burst of kube-controller-manager and kube-scheduler (0: their defaults, or twice --kube-api-qps)")
	fs.BoolVar(&o.scale, "scale", false, "settings for thousands of nodes: kwok renews node leases every 150 s, kube-controller-manager waits 20 min before calling a silent node NotReady, kube-apiserver admits 1600 requests in flight (800 mutating), etcd's quota is 8 GiB, kube-scheduler scores 5% of the nodes for a pod, kwok plays 16 node and pod stages at once")
	fs.StringVar(&o.auditUsers, "audit-users", "", "comma-separated users whose every request kube-apiserver records in logs/audit.log (benchmarks count a controller's requests with it)")
	fs.BoolVar(&o.simulateBusyPort, "simulate-busy-port", false, "testing: occupy the API server's port during the first start attempt")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.dir == "" {
		return nil, errors.New("--dir is required")
	}
	if o.kubeAPIQPS < 0 || o.kubeAPIBurst < 0 {
		return nil, errors.New("--kube-api-qps and --kube-api-burst must not be negative")
	}
	if o.kubeAPIBurst == 0 {
		o.kubeAPIBurst = 2 * o.kubeAPIQPS
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, err
	}
	o.dir = abs
	if o.kwokBin == "" && !o.noKwok {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.kwokBin = filepath.Join(filepath.Dir(self), "kwok")
	}
	return o, nil
}

// The --scale settings. kwok renews each node's Lease every quarter of its duration: at the
// default 40 s that is 200 writes a second for 2,000 nodes, most of what a 2-core machine has.
const (
	scaleNodeLeaseSeconds    = "600"
	scaleNodeMonitorGrace    = "20m"
	scaleMaxInflight         = "1600"
	scaleMaxMutatingInflight = "800"
	scaleEtcdQuotaBytes      = "8589934592"
)

// nodeLeaseSeconds is kwok's --node-lease-duration-seconds.
func (o *options) nodeLeaseSeconds() string {
	if o.scale {
		return scaleNodeLeaseSeconds
	}
	return "40"
}

// scaleKwokParallelism is how many Node and Pod stages (and node Leases) kwok plays at once under
// --scale. At its default of 4, with a loaded kube-apiserver answering a patch in about a second,
// kwok made a new node Ready a median 140 s after it was created during a 2,000-node scale-up here
// (the node-initialize stage queued behind the heartbeats of the nodes already there), and
// kube-scheduler cannot bind to a node that is not Ready.
const scaleKwokParallelism = 16

// kwokConfiguration is the KwokConfiguration document appended to kwok's --config under --scale
// (empty otherwise): the parallelism of scaleKwokParallelism.
func (o *options) kwokConfiguration() []byte {
	if !o.scale {
		return nil
	}
	return []byte(fmt.Sprintf("---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"+
		"  nodePlayStageParallelism: %[1]d\n  podPlayStageParallelism: %[1]d\n  nodeLeaseParallelism: %[1]d\n",
		scaleKwokParallelism))
}

// scaleArgs are the extra flags of one component under --scale.
func (o *options) scaleArgs(component string) []string {
	if !o.scale {
		return nil
	}
	switch component {
	case "etcd":
		return []string{"--quota-backend-bytes", scaleEtcdQuotaBytes}
	case "kube-apiserver":
		return []string{"--max-requests-inflight", scaleMaxInflight, "--max-mutating-requests-inflight", scaleMaxMutatingInflight}
	case "kube-controller-manager":
		return []string{"--node-monitor-grace-period", scaleNodeMonitorGrace}
	}
	return nil
}

// scaleNodesToScore is kube-scheduler's percentageOfNodesToScore under --scale: by default it
// scores about 35% of 2,000 nodes for every pod (its adaptive default, 50% less 1% per 125
// nodes), which held a 20,000-pod scale-up here to about 10 pods bound a second; at 5% it still
// scores at least 100 nodes (its floor) and takes the best of them, as large clusters tune it.
const scaleNodesToScore = 5

// schedulerConfig is kube-scheduler's configuration under --scale: the kubeconfig, no leader
// election, the client rates of --kube-api-qps/--kube-api-burst, and scaleNodesToScore.
func (o *options) schedulerConfig(kubeconfig string) string {
	client := fmt.Sprintf("clientConnection:\n  kubeconfig: %q\n", kubeconfig)
	if o.kubeAPIQPS > 0 {
		client += fmt.Sprintf("  qps: %d\n", o.kubeAPIQPS)
	}
	if o.kubeAPIBurst > 0 {
		client += fmt.Sprintf("  burst: %d\n", o.kubeAPIBurst)
	}
	return "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		client +
		"leaderElection:\n  leaderElect: false\n" +
		fmt.Sprintf("percentageOfNodesToScore: %d\n", scaleNodesToScore)
}

// rateLimitArgs are the client rate-limit flags of kube-controller-manager and kube-scheduler.
func (o *options) rateLimitArgs() []string {
	if o.kubeAPIQPS == 0 && o.kubeAPIBurst == 0 {
		return nil
	}
	var args []string
	if o.kubeAPIQPS > 0 {
		args = append(args, "--kube-api-qps", strconv.Itoa(o.kubeAPIQPS))
	}
	if o.kubeAPIBurst > 0 {
		args = append(args, "--kube-api-burst", strconv.Itoa(o.kubeAPIBurst))
	}
	return args
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s capstan-cp: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// child is one supervised component process.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	err     error
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of the child's log.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type cluster struct {
	o        *options
	self     string
	pki      *pki
	mu       sync.Mutex
	children []*child
	died     chan *child
	ports    map[string]int
	attempt  int
	// apiserverArgs start kube-apiserver again after a test stopped it (SIGUSR1/SIGUSR2).
	apiserverArgs []string
	apiserver     *child
	restarts      int
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.o.dir}, parts...)...)
}

func (c *cluster) writePids() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "supervisor %d\n", os.Getpid())
	for _, ch := range c.children {
		if ch.cmd.Process != nil && !ch.exited() {
			fmt.Fprintf(&b, "%s %d\n", ch.name, ch.cmd.Process.Pid)
		}
	}
	_ = os.WriteFile(c.path("pids"), []byte(b.String()), 0o644)
}

func (c *cluster) start(name, bin string, args []string, env []string) (*child, error) {
	logPath := c.path("logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "==== %s starting: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Dir = c.o.dir
	cmd.Env = append(os.Environ(), env...)
	// A child must never outlive the supervisor, however the supervisor dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ch := &child{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	c.mu.Lock()
	c.children = append(c.children, ch)
	c.mu.Unlock()
	c.writePids()
	logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	go func() {
		ch.err = cmd.Wait()
		f.Close()
		// Report only unexpected deaths: stopAll removes children before signalling them.
		// (Sent before done is closed, so a stopAll that returned has seen every report.)
		if c.current(ch) {
			select {
			case c.died <- ch:
			default:
			}
		}
		close(ch.done)
	}()
	return ch, nil
}

// current reports whether ch belongs to the running set (not stopped on purpose).
func (c *cluster) current(ch *child) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, other := range c.children {
		if other == ch {
			return true
		}
	}
	return false
}

// stopAll stops children in reverse start order: SIGTERM, then SIGKILL after a grace period.
func (c *cluster) stopAll(grace time.Duration) {
	c.mu.Lock()
	children := append([]*child(nil), c.children...)
	c.children = nil
	c.mu.Unlock()
	stopOne := func(ch *child) {
		if ch.exited() {
			return
		}
		_ = ch.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ch.done:
		case <-time.After(grace):
			logf("%s did not stop in %s, killing", ch.name, grace)
			_ = ch.cmd.Process.Kill()
			<-ch.done
		}
	}
	// Everything but etcd in parallel, then etcd last.
	var wg sync.WaitGroup
	var etcd *child
	for _, ch := range children {
		if ch.name == "etcd" {
			etcd = ch
			continue
		}
		wg.Add(1)
		go func(ch *child) { defer wg.Done(); stopOne(ch) }(ch)
	}
	wg.Wait()
	if etcd != nil {
		stopOne(etcd)
	}
	c.writePids()
}

// waitHTTP polls url until it answers 200, the child dies, or the deadline passes.
func waitHTTP(ctx context.Context, client *http.Client, url string, ch *child) error {
	var last string
	for {
		if ch.exited() {
			return childDiedError(ch)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (last: %s)", ch.name, url, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func childDiedError(ch *child) error {
	<-ch.done
	tail := tailFile(ch.logPath, 40)
	err := fmt.Errorf("%s exited (%v); last lines of %s:\n%s", ch.name, ch.err, ch.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		return errors.Join(errPortInUse, err)
	}
	return err
}

func (c *cluster) startAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.startTimeout)
	defer cancel()
	ports := map[string]int{}
	for _, n := range []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"} {
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("find a free port: %w", err)
		}
		ports[n] = p
	}
	c.ports = ports
	if c.o.simulateBusyPort && c.attempt == 1 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports["apiserver"]))
		if err == nil {
			logf("simulating a busy port: holding %d", ports["apiserver"])
			defer l.Close()
		}
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", ports["apiserver"])
	// Kubeconfigs (one identity per component).
	kcs := []struct {
		file, user string
		groups     []string
	}{
		{"kubeconfig", "capstan-admin", []string{"system:masters"}},
		{"controller-manager.kubeconfig", "system:kube-controller-manager", nil},
		{"scheduler.kubeconfig", "system:kube-scheduler", nil},
		{"kwok.kubeconfig", "kwok-controller", []string{"system:masters"}},
	}
	for _, k := range kcs {
		if err := c.pki.kubeconfig(c.path(k.file), server, k.user, k.groups); err != nil {
			return err
		}
	}

	// etcd
	etcdData := c.path("etcd")
	_ = os.RemoveAll(etcdData)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-client"])
	etcd, err := c.start("etcd", c.self, append([]string{"etcd",
		"--data-dir", etcdData,
		"--listen-client-url", etcdURL,
		"--listen-peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-peer"]),
	}, c.o.scaleArgs("etcd")...), nil)
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(ctx, plain, etcdURL+"/health", etcd); err != nil {
		return err
	}
	logf("etcd ready at %s", etcdURL)

	// kube-apiserver
	c.apiserverArgs = []string{"kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports["apiserver"]),
		"--cert-dir", c.path("pki"),
		"--tls-cert-file", c.pki.path("apiserver.crt"),
		"--tls-private-key-file", c.pki.path("apiserver.key"),
		"--client-ca-file", c.pki.path("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.pki.path("sa.pub"),
		"--service-account-signing-key-file", c.pki.path("sa.key"),
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", serviceCIDR,
		"--allow-privileged=true",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type", "none",
		"--v", "1",
	}
	c.apiserverArgs = append(c.apiserverArgs, c.o.scaleArgs("kube-apiserver")...)
	if c.o.auditUsers != "" {
		policy, err := c.writeAuditPolicy()
		if err != nil {
			return err
		}
		c.apiserverArgs = append(c.apiserverArgs,
			"--audit-policy-file", policy,
			"--audit-log-path", c.path("logs/audit.log"),
			"--audit-log-maxbackup", "0")
	}
	apiserver, err := c.start("kube-apiserver", c.self, c.apiserverArgs, nil)
	if err != nil {
		return err
	}
	c.apiserver = apiserver
	admin, err := c.adminHTTPClient()
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, admin, server+"/readyz", apiserver); err != nil {
		return err
	}
	logf("kube-apiserver ready at %s", server)

	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed loopback health endpoints
	}}
	type probe struct {
		ch  *child
		url string
		c   *http.Client
	}
	var probes []probe
	if !c.o.noCM {
		kc := c.path("controller-manager.kubeconfig")
		cm, err := c.start("kube-controller-manager", c.self, append([]string{"kube-controller-manager",
			"--kubeconfig", kc,
			"--authentication-kubeconfig", kc,
			"--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(ports["controller-manager"]),
			"--cert-dir", c.path("controller-manager"),
			"--service-account-private-key-file", c.pki.path("sa.key"),
			"--root-ca-file", c.pki.path("ca.crt"),
			"--cluster-signing-cert-file", c.pki.path("ca.crt"),
			"--cluster-signing-key-file", c.pki.path("ca.key"),
			"--use-service-account-credentials=true",
			"--controllers", "*",
			"--leader-elect=false",
			"--profiling=false",
			"--v", "1",
		}, append(c.o.rateLimitArgs(), c.o.scaleArgs("kube-controller-manager")...)...), nil)
		if err != nil {
			return err
		}
		probes = append(probes, probe{cm, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports["controller-manager"]), insecure})
	}
	if !c.o.noScheduler {
		kc := c.path("scheduler.kubeconfig")
		args := []string{"kube-scheduler",
			"--authentication-kubeconfig", kc,
			"--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(ports["scheduler"]),
			"--cert-dir", c.path("scheduler"),
			"--profiling=false",
			"--v", "1",
		}
		if c.o.scale {
			// A configuration file replaces the client and leader-election flags.
			config := c.path("scheduler.yaml")
			if err := os.WriteFile(config, []byte(c.o.schedulerConfig(kc)), 0o644); err != nil {
				return err
			}
			args = append(args, "--config", config)
		} else {
			args = append(args, "--kubeconfig", kc, "--leader-elect=false")
			args = append(args, c.o.rateLimitArgs()...)
		}
		s, err := c.start("kube-scheduler", c.self, args, nil)
		if err != nil {
			return err
		}
		probes = append(probes, probe{s, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports["scheduler"]), insecure})
	}
	if !c.o.noKwok {
		home := c.path("kwok")
		if err := os.MkdirAll(home, 0o755); err != nil {
			return err
		}
		stages := filepath.Join(home, "stages.yaml")
		if err := os.WriteFile(stages, append(append([]byte{}, kwokStages...), c.o.kwokConfiguration()...), 0o644); err != nil {
			return err
		}
		k, err := c.start("kwok", c.o.kwokBin, []string{
			"--kubeconfig", c.path("kwok.kubeconfig"),
			"--config", stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector", kwokNodeSelector,
			"--node-lease-duration-seconds", c.o.nodeLeaseSeconds(),
			"--cidr", "10.244.0.0/16",
			"--node-ip", "10.245.0.1",
			"--server-address", fmt.Sprintf("127.0.0.1:%d", ports["kwok"]),
		}, []string{"HOME=" + home}) // keep ~/.kwok/kwok.yaml of the user out
		if err != nil {
			return err
		}
		probes = append(probes, probe{k, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports["kwok"]), plain})
	}
	for _, p := range probes {
		if err := waitHTTP(ctx, p.c, p.url, p.ch); err != nil {
			return err
		}
		logf("%s ready", p.ch.name)
	}
	return nil
}

// writeAuditPolicy writes the audit policy of --audit-users: Metadata for their requests, once
// each (when the response completes), nothing for anyone else.
func (c *cluster) writeAuditPolicy() (string, error) {
	var users []string
	for _, u := range strings.Split(c.o.auditUsers, ",") {
		if u = strings.TrimSpace(u); u != "" {
			users = append(users, strconv.Quote(u))
		}
	}
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  users: [%s]
- level: None
`, strings.Join(users, ", "))
	path := c.path("audit-policy.yaml")
	return path, os.WriteFile(path, []byte(policy), 0o644)
}

func (c *cluster) adminHTTPClient() (*http.Client, error) {
	if err := c.pki.issue("probe", "capstan-probe", []string{"system:masters"}, false, nil, nil); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(c.pki.path("probe.crt"), c.pki.path("probe.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.caCert)
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

// prepareDir stops whatever an earlier run left in dir and empties it,
// keeping only supervisor.log (which the launcher may already be writing).
func prepareDir(dir string) error {
	killStale(dir, 10*time.Second)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "supervisor.log" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	for _, d := range []string{"logs", "pki", "controller-manager", "scheduler"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func supervise(args []string) int {
	o, err := parseOptions("supervise", args)
	if err != nil {
		logf("%v", err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := prepareDir(o.dir); err != nil {
		logf("prepare %s: %v", o.dir, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(o.dir, "supervisor.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	p, err := newPKI(filepath.Join(o.dir, "pki"), net.ParseIP(serviceIP))
	if err != nil {
		logf("generate certificates: %v", err)
		return 1
	}
	c := &cluster{o: o, self: self, pki: p, died: make(chan *child, 16)}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan string, 4)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		s := <-sigs
		stop <- "signal " + s.String()
		cancel()
	}()
	// Tests stop (SIGUSR1, kill -9) and start again (SIGUSR2) kube-apiserver to check that
	// clients recover; the state goes to the file "apiserver" ("down", or "up N" after the Nth restart).
	restart := make(chan os.Signal, 4)
	signal.Notify(restart, syscall.SIGUSR1, syscall.SIGUSR2)
	if o.watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop <- "standard input closed"
			cancel()
		}()
	}

	started := time.Now()
	for attempt := 1; ; attempt++ {
		c.attempt = attempt
		err = c.startAll(ctx)
		if err == nil {
			break
		}
		// The report shows every log as it was at the failure, before stopping the rest.
		report := failureReport(o.dir, err)
		c.stopAll(3 * time.Second)
		// Deaths during a failed attempt were handled by that attempt.
		for len(c.died) > 0 {
			<-c.died
		}
		if errors.Is(err, errPortInUse) && attempt < maxAttempts && ctx.Err() == nil {
			logf("attempt %d: %v; retrying with new ports", attempt, err)
			continue
		}
		writeFailure(o.dir, report)
		return 1
	}
	ready := fmt.Sprintf("kubeconfig=%s\nserver=https://127.0.0.1:%d\nsupervisor_pid=%d\nstartup_seconds=%.2f\n",
		filepath.Join(o.dir, "kubeconfig"), c.ports["apiserver"], os.Getpid(), time.Since(started).Seconds())
	_ = os.WriteFile(filepath.Join(o.dir, "env"), []byte("export KUBECONFIG="+filepath.Join(o.dir, "kubeconfig")+"\n"), 0o644)
	if err := writeAtomic(filepath.Join(o.dir, "ready"), []byte(ready)); err != nil {
		logf("%v", err)
	}
	logf("control plane ready in %.2fs; KUBECONFIG=%s", time.Since(started).Seconds(), filepath.Join(o.dir, "kubeconfig"))

	var dead *child
	for dead == nil {
		select {
		case why := <-stop:
			logf("stopping: %s", why)
			_ = os.Remove(filepath.Join(o.dir, "ready"))
			c.stopAll(5 * time.Second)
			// etcd data is never reused (each start begins empty); free the disk now.
			_ = os.RemoveAll(filepath.Join(o.dir, "etcd"))
			logf("stopped")
			return 0
		case ch := <-c.died:
			if c.current(ch) {
				dead = ch
			}
		case s := <-restart:
			if err := c.apiserverSignal(ctx, s); err != nil {
				logf("kube-apiserver %v: %v", s, err)
			}
		}
	}
	_ = os.Remove(filepath.Join(o.dir, "ready"))
	report := failureReport(o.dir, childDiedError(dead))
	c.stopAll(5 * time.Second)
	writeFailure(o.dir, report)
	_ = os.RemoveAll(filepath.Join(o.dir, "etcd"))
	return 1
}

// failureReport describes a failure with the tail of every component log.
func failureReport(dir string, err error) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "control plane failed: %v\n", err)
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		fmt.Fprintf(&b, "---- last lines of %s ----\n%s\n", l, tailFile(l, 20))
	}
	return b.Bytes()
}

func writeFailure(dir string, report []byte) {
	logf("%s", report)
	_ = writeAtomic(filepath.Join(dir, "failed"), report)
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// apiserverSignal kills kube-apiserver (SIGUSR1) or starts it again on the same port (SIGUSR2),
// then records the state in the file "apiserver".
func (c *cluster) apiserverSignal(ctx context.Context, s os.Signal) error {
	state := c.path("apiserver")
	if s == syscall.SIGUSR1 {
		ch := c.apiserver
		if ch == nil || ch.exited() {
			return writeAtomic(state, []byte("down\n"))
		}
		c.forget(ch)
		_ = ch.cmd.Process.Kill()
		<-ch.done
		c.writePids()
		logf("kube-apiserver killed on request")
		return writeAtomic(state, []byte("down\n"))
	}
	if c.apiserver != nil && !c.apiserver.exited() {
		return nil
	}
	ch, err := c.start("kube-apiserver", c.self, c.apiserverArgs, nil)
	if err != nil {
		return err
	}
	c.apiserver = ch
	admin, err := c.adminHTTPClient()
	if err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, c.o.startTimeout)
	defer cancel()
	if err := waitHTTP(wait, admin, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.ports["apiserver"]), ch); err != nil {
		return err
	}
	c.restarts++
	logf("kube-apiserver started again (restart %d)", c.restarts)
	return writeAtomic(state, []byte(fmt.Sprintf("up %d\n", c.restarts)))
}

// forget removes ch from the running set, so that its death is not taken for a failure.
func (c *cluster) forget(ch *child) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.children[:0]
	for _, other := range c.children {
		if other != ch {
			kept = append(kept, other)
		}
	}
	c.children = kept
}
