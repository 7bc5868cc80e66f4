package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func (o *options) superviseArgs() []string {
	args := []string{"supervise", "--dir", o.dir, "--start-timeout", o.startTimeout.String()}
	if o.kwokBin != "" {
		args = append(args, "--kwok-bin", o.kwokBin)
	}
	if o.noCM {
		args = append(args, "--no-controller-manager")
	}
	if o.noScheduler {
		args = append(args, "--no-scheduler")
	}
	if o.noKwok {
		args = append(args, "--no-kwok")
	}
	if o.kubeAPIQPS > 0 {
		args = append(args, "--kube-api-qps", strconv.Itoa(o.kubeAPIQPS))
	}
	if o.kubeAPIBurst > 0 {
		args = append(args, "--kube-api-burst", strconv.Itoa(o.kubeAPIBurst))
	}
	if o.simulateBusyPort {
		args = append(args, "--simulate-busy-port")
	}
	return args
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// belongsTo reports whether pid is a process of the control plane in dir:
// its command line names dir, or its working directory is dir.
func belongsTo(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && strings.Contains(string(cmdline), dir) {
		return true
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && cwd == dir
}

// recordedPids returns the pids recorded in dir (supervisor first).
func recordedPids(dir string) []int {
	var pids []int
	seen := map[int]bool{}
	add := func(p int) {
		if p > 1 && p != os.Getpid() && !seen[p] {
			seen[p] = true
			pids = append(pids, p)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "supervisor.pid")); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			add(p)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 {
				if p, err := strconv.Atoi(f[1]); err == nil {
					add(p)
				}
			}
		}
	}
	return pids
}

// killStale stops every process recorded in dir that still runs: SIGTERM to
// the supervisor (which stops its children), then SIGKILL to anything left.
// It returns the pids that survived.
func killStale(dir string, grace time.Duration) []int {
	var live []int
	for _, p := range recordedPids(dir) {
		if alive(p) && belongsTo(p, dir) {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	logf("stopping processes of %s: %v", dir, live)
	for _, p := range live {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	waitGone := func(d time.Duration) []int {
		deadline := time.Now().Add(d)
		for {
			var left []int
			for _, p := range live {
				if alive(p) {
					left = append(left, p)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				return left
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	left := waitGone(grace)
	for _, p := range left {
		if belongsTo(p, dir) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	return waitGone(5 * time.Second)
}

// up starts a detached supervisor, waits until the control plane is ready and
// prints the kubeconfig path.
func up(args []string) int {
	o, err := parseOptions("up", args)
	if err != nil {
		logf("%v", err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		logf("%v", err)
		return 1
	}
	if left := killStale(o.dir, 10*time.Second); len(left) > 0 {
		logf("could not stop earlier processes %v of %s", left, o.dir)
		return 1
	}
	if err := os.RemoveAll(o.dir); err != nil {
		logf("clean %s: %v", o.dir, err)
		return 1
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	logPath := filepath.Join(o.dir, "supervisor.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer logFile.Close()
	cmd := exec.Command(self, o.superviseArgs()...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = o.dir
	// Its own session: it survives this command and `down` can find it by pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logf("start supervisor: %v", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(o.startTimeout + 30*time.Second)
	readyPath := filepath.Join(o.dir, "ready")
	for {
		if _, err := os.Stat(readyPath); err == nil {
			fmt.Fprintf(os.Stderr, "control plane ready in %.1fs (logs in %s)\n", time.Since(started).Seconds(), filepath.Join(o.dir, "logs"))
			fmt.Println(filepath.Join(o.dir, "kubeconfig"))
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "control plane supervisor exited (%v); its log %s:\n%s\n", err, logPath, tailFile(logPath, 200))
			return 1
		case <-deadline:
			fmt.Fprintf(os.Stderr, "control plane not ready after %s; stopping it. Supervisor log %s:\n%s\n", o.startTimeout+30*time.Second, logPath, tailFile(logPath, 200))
			killStale(o.dir, 5*time.Second)
			return 1
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func down(args []string) int {
	o, err := parseOptions("down", args)
	if err != nil {
		logf("%v", err)
		return 2
	}
	left := killStale(o.dir, 20*time.Second)
	_ = os.Remove(filepath.Join(o.dir, "ready"))
	if len(left) > 0 {
		logf("processes still running: %v", left)
		return 1
	}
	return 0
}

func env(args []string) int {
	o, err := parseOptions("env", args)
	if err != nil {
		logf("%v", err)
		return 2
	}
	if _, err := os.Stat(filepath.Join(o.dir, "ready")); err != nil {
		logf("no running control plane in %s", o.dir)
		return 1
	}
	fmt.Printf("export KUBECONFIG=%s\n", filepath.Join(o.dir, "kubeconfig"))
	return 0
}
