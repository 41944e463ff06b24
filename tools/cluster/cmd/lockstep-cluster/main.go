// Command lockstep-cluster is a multi-call binary that bundles a real
// Kubernetes control plane, built from the upstream Go modules:
//
//	lockstep-cluster apiserver [--embedded-etcd-dir=DIR] [--embedded-etcd-client-port=N] [--embedded-etcd-peer-port=N] [kube-apiserver flags...]
//	lockstep-cluster controller-manager [kube-controller-manager flags...]
//	lockstep-cluster scheduler [kube-scheduler flags...]
//	lockstep-cluster kubectl [kubectl args...]
//
// The component may also be chosen by the name the binary is invoked as
// (argv[0]), e.g. through a symlink called "kubectl".
//
// The "apiserver" subcommand starts an embedded etcd (go.etcd.io/etcd/server/v3/embed,
// the version k8s.io/kubernetes itself requires) on loopback and then runs the
// kube-apiserver command pointed at it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	_ "time/tzdata" // CronJob time zone support

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s {apiserver|controller-manager|scheduler|kubectl} [args...]\n", filepath.Base(os.Args[0]))
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler":
	default:
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	// Every cobra command below parses os.Args[1:]; make that the component's args.
	os.Args = append([]string{name}, args...)

	switch strings.TrimPrefix(name, "kube-") {
	case "apiserver":
		os.Exit(runAPIServer())
	case "controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubectl", "ctl":
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		command := kubectlcmd.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		os.Exit(0)
	case "version":
		fmt.Println(versionString())
	default:
		usage()
	}
}
