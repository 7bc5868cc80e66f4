package main

import (
	"os"
	"path/filepath"
	_ "time/tzdata" // for CronJob time zone support

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// runComponent runs one upstream component's cobra command with the given
// arguments (os.Args[2:]) and returns its exit code.
func runComponent(name string, args []string) (int, bool) {
	var command *cobra.Command
	switch name {
	case "kube-apiserver":
		command = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		command = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "kubectl":
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(append([]string{"kubectl"}, args...))) // nolint:errcheck
		command = kubectlcmd.NewDefaultKubectlCommand()
		command.SetArgs(args)
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		return 0, true
	case "etcd":
		return runEtcd(args), true
	case "supervise":
		return supervise(args), true
	case "up":
		return up(args), true
	case "down":
		return down(args), true
	case "env":
		return env(args), true
	default:
		return 0, false
	}
	command.SetArgs(args)
	return cli.Run(command), true
}

func main() {
	// Invoked through a symlink named after a component (bin/kubectl -> capstan-cp).
	if base := filepath.Base(os.Args[0]); base != "capstan-cp" {
		if code, ok := runComponent(base, os.Args[1:]); ok {
			os.Exit(code)
		}
	}
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: capstan-cp <up|down|env|supervise|kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|etcd> [args]\n")
		os.Exit(2)
	}
	if code, ok := runComponent(os.Args[1], os.Args[2:]); ok {
		os.Exit(code)
	}
	os.Stderr.WriteString("unknown subcommand " + os.Args[1] + "\n")
	os.Exit(2)
}
